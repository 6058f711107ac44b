"""CPU per row of the ledger writer's flush: spooling, applying a batch, and both together.

Run: `python bench/ledger_flush.py [--src CHECKOUT] [--db sqlite|postgresql] [-n 200]
[--rounds 30] [--keys 4]`. Builds `n` request records like the gateway's for small requests
without a task id (a wrapper task each, a prefix verdict, costs), spread over `keys` model
aliases, and times with `time.process_time` (the whole process's CPU, so the aiosqlite
thread and the spool's `to_thread` count, as they do in the gateway) three things per
round, each on fresh records: `spool` (one `Spool.write` of the batch, with its fsyncs),
`apply` (`store.apply_batch` in one transaction: the request rows, the task upsert, the six
rollup upserts) and `writer` (`LedgerWriter.submit` of each record, then `flush()`: the
spool and the apply as the gateway runs them). Building the records is not timed. Prints
one JSON object: the median and the best round, in microseconds per row, and the checkout
the gateway was imported from. `--src` imports the gateway from another checkout (an A/B
of two trees: `git worktree add /tmp/before <commit>`). PostgreSQL: a fresh database on
127.0.0.1:5432 (trust auth), dropped at the end; `server_mean` is the CPU its backends
used per row (utime+stime from /proc over all measured rounds: clock ticks, so a mean).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def small_records(n: int, keys: int = 4) -> list[Any]:
    """`n` records of small untasked requests, like the gateway writes under load."""
    from gateway.ledger.records import RequestRecord

    now = datetime.now(UTC)
    cost = Decimal("0.0000123")
    rows = []
    for index in range(n):
        token = uuid.uuid4().hex
        rows.append(
            RequestRecord(
                request_id=f"req-{token}", task_id=f"task-{token}", team="bench",
                project="default", model_alias=f"bench-gpt-{index % keys}", backend="openai",
                provider="openai", upstream_model="mock-model", tier_requested="standard",
                tier_served="standard", prompt_tokens=12, completion_tokens=9,
                cost_input=cost, cost_output=cost, cost_total=cost * 2, duration_ms=3,
                ttft_ms=2, prefix_status="fresh", expected_cached_tokens=0, created_at=now,
            )
        )  # fmt: skip
    return rows


@contextlib.asynccontextmanager
async def warm_sqlite_writer() -> AsyncIterator[Any]:
    """A started `LedgerWriter` on a migrated SQLite file in a temporary folder, as the
    gateway runs it, with 50 rows already flushed (its statements prepared); closed after."""
    from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'l.db'}"
        await migrate(url)
        engine = make_engine(url)
        writer = LedgerWriter(engine, WriterConfig(spool_dir=Path(tmp) / "spool"))
        await writer.start()
        try:
            for record in small_records(50):
                writer.submit(record)
            await writer.flush()
            yield writer
        finally:
            await writer.close()
            await engine.dispose()


async def _cpu(step: Callable[[], Awaitable[object]]) -> float:
    start = time.process_time()
    await step()
    return time.process_time() - start


TICK = os.sysconf("SC_CLK_TCK")


def _server_cpu(pids: list[int]) -> float:
    """utime+stime of PostgreSQL's backends (clock ticks: sums over many rounds only)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


async def _backends(url: str) -> list[int]:
    """The server processes serving this database (PostgreSQL), none for SQLite."""
    if not url.startswith("postgresql"):
        return []
    import asyncpg

    admin = await asyncpg.connect(PG_ADMIN)
    try:
        name = url.rsplit("/", 1)[1]
        rows = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1", name)
    finally:
        await admin.close()
    return [row["pid"] for row in rows]


async def _rounds(url: str, spool_dir: Path, n: int, rounds: int, keys: int) -> dict[str, Any]:
    from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate, store
    from gateway.ledger.spool import Spool

    await migrate(url)
    engine = make_engine(url)
    spool = Spool(spool_dir / "direct")
    # Long intervals: only flush() moves rows, so each timing covers exactly one batch.
    config = WriterConfig(spool_dir=spool_dir / "writer", flush_interval=3600.0)
    writer = LedgerWriter(engine, config)
    await writer.start()

    async def apply(batch: list[Any]) -> None:
        async with engine.begin() as connection:
            await store.apply_batch(connection, batch)

    async def flush(batch: list[Any]) -> None:
        for record in batch:
            writer.submit(record)
        await writer.flush()

    times: dict[str, list[float]] = {"spool": [], "apply": [], "writer": []}
    server: dict[str, float] = dict.fromkeys(times, 0.0)
    pids: list[int] = []
    try:
        for warm in (True,) * 3 + (False,) * rounds:
            if not pids:
                pids = await _backends(url)
            for name, run in (
                ("spool", lambda b: asyncio.to_thread(spool.write, b)),
                ("apply", apply),
                ("writer", flush),
            ):
                batch = small_records(n, keys)
                before = _server_cpu(pids)
                seconds = await _cpu(lambda: run(batch))  # noqa: B023 (awaited at once)
                if not warm:
                    times[name].append(seconds / n * 1e6)
                    server[name] += _server_cpu(pids) - before
    finally:
        await writer.close()
        await engine.dispose()
    result: dict[str, Any] = {
        name: {"median": round(statistics.median(v), 1), "best": round(min(v), 1)}
        for name, v in times.items()
    }
    if pids:  # PostgreSQL's own CPU per row, all measured rounds together
        for name, total in server.items():
            result[name]["server_mean"] = round(total / (rounds * n) * 1e6, 1)
    return result


async def _postgres_url() -> tuple[str, str]:
    import asyncpg

    name = f"ledger_flush_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(PG_ADMIN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return name, f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"


async def _drop(name: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(PG_ADMIN)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    import gateway

    with tempfile.TemporaryDirectory(prefix="ledger-flush-") as tmp:
        directory = Path(tmp)
        if args.db == "sqlite":
            url = f"sqlite+aiosqlite:///{directory / 'ledger.db'}"
            result = await _rounds(url, directory, args.n, args.rounds, args.keys)
        else:
            name, url = await _postgres_url()
            try:
                result = await _rounds(url, directory, args.n, args.rounds, args.keys)
            finally:
                await _drop(name)
    return {"gateway": gateway.__file__, "db": args.db, "n": args.n, "us_per_row": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("-n", type=int, default=200, help="rows per flush")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--keys", type=int, default=4, help="model aliases the rows spread over")
    args = parser.parse_args()
    use_checkout(args.src)
    print(json.dumps(asyncio.run(_main(args))))


if __name__ == "__main__":
    main()
