"""How long the ledger writer's background work holds the event loop, and the GIL, at a time.

Run: `python bench/ledger_stall.py [--src CHECKOUT] [--db sqlite|postgresql] [--rate 700]
[--seconds 6] [--flush-interval 0.2] [--probe-work-us 0]`. A `LedgerWriter` runs as in the
gateway (its spool and drain loops, `sys.setswitchinterval(0.001)` as the serving process
sets it) while this process submits `--rate` records a second (a gateway at concurrency 1
serves ~700 small requests a second), and measures, by CPU time (`time.thread_time`:
robust to a busy box, unlike wall-clock lateness):

- `loop`: each callback the event loop runs for the writer's tasks (`ledger-spool`,
  `ledger-drain`): how long the loop was held in one go by ledger code; no request can
  run meanwhile;
- `threads`: each call the writer hands to another thread (`asyncio.to_thread` and the
  aiosqlite connection's thread): its CPU time, an upper bound on how long that thread
  held the interpreter lock in one go (a C call that does not release it, such as sqlite3
  binding a statement's parameters, cannot be interrupted by the switch interval);
- `probe`: a task that sleeps 0.5 ms and records how late it wakes (wall time: what a
  request's wake-up waits; `--probe-work-us N` then runs N µs of Python, holding the
  interpreter lock as a request's work does; a busy box adds its own lateness, so compare
  runs in turns); `probe_beside_threads` the wakes whose sleep a writer thread call overlapped,
  `probe_alone` the others: the box's own lateness falls on both alike, so the gap
  between them is what the writer's threads cost a wake-up (run it pinned to one core,
  `taskset -c 1`, as the gateway is in the hot-path benches).

Prints one JSON object: for each, the count, p50, p99, p99.9 and max in milliseconds, the
loop's and threads' total CPU per row in microseconds, and the writer's counters.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from functools import wraps
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]
from ledger_flush import small_records  # stdlib imports only: the gateway comes later

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
LEDGER_TASKS = frozenset({"ledger-spool", "ledger-drain"})


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000, 3)

    return {
        "count": len(ordered),
        "p50": round(statistics.median(ordered) * 1000, 3),
        "p99": pct(0.99),
        "p99.9": pct(0.999),
        "max": round(ordered[-1] * 1000, 3),
    }


class Meter:
    """Times the loop's callbacks for the ledger's tasks and the calls handed to threads."""

    def __init__(self) -> None:
        self.loop: list[float] = []
        self.threads: list[float] = []
        self.lock = threading.Lock()
        self.started = 0  # thread calls started so far
        self.running = 0  # thread calls running now
        self.beside: list[float] = []  # probe wakes that a thread call overlapped
        self.alone: list[float] = []  # the others

    def install(self) -> None:
        handle_run = asyncio.events.Handle._run
        loop_times = self.loop

        def timed_run(handle: Any) -> None:
            owner = getattr(handle._callback, "__self__", None)
            name = owner.get_name() if isinstance(owner, asyncio.Task) else None
            if name not in LEDGER_TASKS:
                handle_run(handle)
                return
            start = time.thread_time()
            handle_run(handle)
            loop_times.append(time.thread_time() - start)

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

        def timed(function: Any) -> Any:
            @wraps(function)
            def call(*args: Any, **kwargs: Any) -> Any:
                with self.lock:
                    self.started += 1
                    self.running += 1
                start = time.thread_time()
                try:
                    return function(*args, **kwargs)
                finally:
                    spent = time.thread_time() - start
                    with self.lock:
                        self.threads.append(spent)
                        self.running -= 1

            return call

        original_to_thread = asyncio.to_thread

        async def to_thread(function: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await original_to_thread(timed(function), *args, **kwargs)

        asyncio.to_thread = to_thread  # type: ignore[assignment]
        try:
            import aiosqlite.core
        except ImportError:
            return
        execute = aiosqlite.core.Connection._execute

        async def timed_execute(connection: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            return await execute(connection, timed(fn), *args, **kwargs)

        aiosqlite.core.Connection._execute = timed_execute  # type: ignore[method-assign]


async def _probe(
    stop: asyncio.Event, lateness: list[float], meter: Meter | None = None, work_s: float = 0.0
) -> None:
    """Sleep 0.5 ms again and again; each wake's lateness, into `meter.beside` if a writer
    thread call ran at some point of the sleep, else `meter.alone` (when given). After each
    wake, `work_s` of Python (CPU time) holds the interpreter lock, as a request does."""
    while not stop.is_set():
        calls, running = (meter.started, meter.running) if meter else (0, 0)
        asleep = time.perf_counter()
        await asyncio.sleep(0.0005)
        late = max(time.perf_counter() - asleep - 0.0005, 0.0)
        lateness.append(late)
        _spin(work_s)
        if meter is not None:
            beside = running or meter.running or meter.started != calls
            (meter.beside if beside else meter.alone).append(late)


def _spin(seconds: float) -> None:
    """Run Python for `seconds` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _run(args: argparse.Namespace, url: str, spool_dir: Path) -> dict[str, Any]:
    from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate

    await migrate(url)
    engine = make_engine(url)
    writer = LedgerWriter(
        engine, WriterConfig(spool_dir=spool_dir, flush_interval=args.flush_interval)
    )
    total = int(args.rate * args.seconds)
    records = small_records(total)
    meter = Meter()
    await writer.start()
    # One warm-up flush: statements compiled, the connection opened.
    for record in small_records(50):
        writer.submit(record)
    await writer.flush()
    meter.install()
    stop = asyncio.Event()
    lateness: list[float] = []
    probe = asyncio.create_task(_probe(stop, lateness, meter, args.probe_work_us / 1e6))
    loop_cpu = time.thread_time()
    process_cpu = time.process_time()
    started = time.perf_counter()
    for index, record in enumerate(records):
        writer.submit(record)
        # Submit at the rate, as requests completing one after another would.
        delay = started + (index + 1) / args.rate - time.perf_counter()
        await asyncio.sleep(max(delay, 0))
    await writer.flush()
    stop.set()
    await probe
    loop_cpu = time.thread_time() - loop_cpu
    process_cpu = time.process_time() - process_cpu
    stats = writer.stats()
    await writer.close()
    await engine.dispose()
    return {
        "loop": _stats(meter.loop),
        "threads": _stats(meter.threads),
        "probe": _stats(lateness),
        "probe_beside_threads": _stats(meter.beside),
        "probe_alone": _stats(meter.alone),
        "ledger_loop_cpu_us_per_row": round(sum(meter.loop) / total * 1e6, 1),
        "threads_cpu_us_per_row": round(sum(meter.threads) / total * 1e6, 1),
        "process_cpu_us_per_row": round(process_cpu / total * 1e6, 1),
        "rows_written": stats.rows_written,
        "flush_failures": stats.flush_failures,
        "loop_thread_cpu_s": round(loop_cpu, 3),
    }


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    import gateway

    sys.setswitchinterval(0.001)  # as gateway.pipeline.offload.share_the_lock does
    with tempfile.TemporaryDirectory(prefix="ledger-stall-") as tmp:
        directory = Path(tmp)
        if args.db == "sqlite":
            url = f"sqlite+aiosqlite:///{directory / 'ledger.db'}"
            result = await _run(args, url, directory / "spool")
        else:
            import asyncpg

            name = f"ledger_stall_{uuid.uuid4().hex[:8]}"
            admin = await asyncpg.connect(PG_ADMIN)
            await admin.execute(f'CREATE DATABASE "{name}"')
            await admin.close()
            try:
                url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
                result = await _run(args, url, directory / "spool")
            finally:
                admin = await asyncpg.connect(PG_ADMIN)
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await admin.close()
    return {"gateway": gateway.__file__, "db": args.db, "rate": args.rate} | result


async def _both(args: argparse.Namespace) -> dict[str, Any]:
    """The run, then (`--baseline`) the same with no flush until the end: what the probe
    sees on this box without the ledger's work."""
    result = await _main(args)
    if args.baseline:
        interval, args.flush_interval = args.flush_interval, 3600.0
        result["baseline_probe"] = (await _main(args))["probe"]
        args.flush_interval = interval
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rate", type=float, default=700.0, help="records submitted a second")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--flush-interval", type=float, default=0.2)
    parser.add_argument("--baseline", action="store_true", help="also run without flushes")
    parser.add_argument(
        "--probe-work-us", type=float, default=0.0, help="Python run after each probe wake"
    )
    args = parser.parse_args()
    use_checkout(args.src)
    print(json.dumps(asyncio.run(_both(args))))


if __name__ == "__main__":
    main()
