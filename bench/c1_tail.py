"""What the slow requests at concurrency 1 overlapped: the ledger flush, a collection, ...

Run: `python bench/c1_tail.py [-n 5000] [--stream] [--burst 6000] [--src DIR[::NAME=VALUE,...]]`.

`--burst N`: right before the measured run, perf-floor's loadgen sends N requests at
c=64 (at most 3 s) to the gateway, as bench/hotpath.py's full run does before its c=1
scenarios, so the c=1 run meets what a burst leaves behind (a ledger backlog, garbage).

Starts perf-floor's mock upstream on core 0 and `farebox serve` pinned to core 1 (the
config of bench/pipeline_cpu.py), launched so that it logs, on the clock loadgen reads
too (CLOCK_MONOTONIC: `time.perf_counter` in both processes), when each of these ran:

- `gc0`, `gc1`, `gc2`: a cyclic collection of that generation (`gc.callbacks`);
- `spool`, `drain`: the ledger writer moving its queue to the spool, applying segments to
  the database (`LedgerWriter._spool_pending`, `LedgerWriter._drain`, wrapped, not edited);
- `keys`: the key cache's poll of the keys table (`KeyCache.refresh`).

A client in this script (aiohttp, one request at a time, pinned to core 0) sends `-n`
small requests to the mock directly, then to the gateway, and keeps each one's start and
end (or first event, `--stream`). Every gateway request is classed by the first event it
overlapped, in the order above, or `none`. Printed: per class, how many requests and their
p50 / p99; the p99 of all, of those that overlapped nothing, and of the direct run, so
"what the p99 would be without X" is read off the table, whatever the box's load adds to
every class alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_cpu import CONFIG, _free_port, _wait_port

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
KINDS = ("gc2", "gc1", "spool", "drain", "keys", "gc0")
LAUNCH = """
import sys, os, gc, time, json, signal, functools
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')
                    and 'editable' not in getattr(f, '__name__', '')]
sys.path.insert(0, sys.argv.pop(1))
events = []
clock = time.perf_counter
started = [0.0]
def collected(phase, info):
    if phase == 'start':
        started[0] = clock()
    else:
        events.append(('gc%d' % info['generation'], started[0], clock()))
gc.callbacks.append(collected)
def spans(kind, method):
    @functools.wraps(method)
    async def wrapper(*args, **kwargs):
        begun = clock()
        try:
            return await method(*args, **kwargs)
        finally:
            events.append((kind, begun, clock()))
    return wrapper
from gateway.ledger.writer import LedgerWriter
from gateway.keys.cache import KeyCache
LedgerWriter._spool_pending = spans('spool', LedgerWriter._spool_pending)
LedgerWriter._drain = spans('drain', LedgerWriter._drain)
KeyCache.refresh = spans('keys', KeyCache.refresh)
from gateway.ledger.spool import Spool
def thread_cpu(kind, method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        begun = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent = time.thread_time() - begun
            events.append((kind, spent, spent))
    return wrapper
# The spool's file I/O in its worker thread: the writer's method, and the commit's delete.
for name in ('append', 'write_encoded', 'remove', 'delete'):
    if hasattr(Spool, name):
        setattr(Spool, name, thread_cpu('cpu_' + name, getattr(Spool, name)))
def dump(*_):
    with open(os.environ['C1_EVENTS'], 'w') as out:
        json.dump(events, out)
    events.clear()
signal.signal(signal.SIGUSR1, lambda *_: events.clear())
signal.signal(signal.SIGUSR2, dump)
from gateway.cli import main
main()
"""


def _body(i: int, model: str, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"Say hello (request {i})."}],
        "max_tokens": 64,
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return json.dumps(body).encode()


async def _client(url: str, model: str, n: int, stream: bool) -> list[tuple[float, float]]:
    """Send `n` requests one at a time; (start, end or first event) of each, in seconds."""
    times: list[tuple[float, float]] = []
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        for i in range(n):
            body = _body(i, model, stream)
            begun = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                if stream:
                    first = None
                    async for line in response.content:
                        if first is None and line.startswith(b"data:"):
                            first = time.perf_counter()
                    end = first or time.perf_counter()
                else:
                    await response.read()
                    end = time.perf_counter()
                if response.status != 200:
                    raise RuntimeError(f"status {response.status} from {url}")
            times.append((begun, end))
    return times


def _run_client(url: str, model: str, n: int, stream: bool) -> list[tuple[float, float]]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = ["taskset", "-c", "0", PY, __file__, "--client", url, model, str(n), str(out)]
    subprocess.run([*cmd, *(["--stream"] if stream else [])], check=True)
    times = [tuple(pair) for pair in json.loads(out.read_text())]
    out.unlink()
    return times  # type: ignore[return-value]


def _burst(floor: Path, url: str, requests: int, stream: bool) -> None:
    """A c=64 loadgen run against the gateway, pinned to core 0 as the client is."""
    cmd = ["taskset", "-c", "0", PY, str(floor / "loadgen.py"), "--url", url]
    cmd += ["--model", "bench-gpt", "-c", "64", "-n", str(requests), "--warmup", "0"]
    cmd += ["--max-seconds", "3", "--timeout", "60"]
    subprocess.run([*cmd, *(["--stream", "--drain"] if stream else [])], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _classify(times: list[tuple[float, float]], events: list[list[Any]]) -> dict[str, list[float]]:
    by_kind: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for kind, begun, ended in events:
        by_kind.setdefault(kind, []).append((begun, ended))
    classes: dict[str, list[float]] = {}
    for begun, ended in times:
        label = "none"
        for kind in KINDS:
            if any(b < ended and e > begun for b, e in by_kind[kind]):
                label = kind
                break
        classes.setdefault(label, []).append((ended - begun) * 1000)
    return classes


def _summary(name: str, latencies: list[float]) -> dict[str, Any]:
    return {
        "class": name,
        "requests": len(latencies),
        "p50_ms": round(_pct(latencies, 50), 3),
        "p99_ms": round(_pct(latencies, 99), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--burst", type=int, default=0, help="c=64 requests just before")
    parser.add_argument("--src", default=str(ROOT), help="DIR[::NAME=VALUE,...]")
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        url, model, n, out = args.client
        times = asyncio.run(_client(url, model, int(n), args.stream))
        Path(out).write_text(json.dumps(times))
        return
    src, _, extra = args.src.partition("::")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= dict(item.split("=", 1) for item in extra.split(",") if item)
    mock_port, port = _free_port(), _free_port()
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(CONFIG.format(port=mock_port))
    events_file = data / "events.json"
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning", "FAREBOX_PORT": str(port)}
    env["C1_EVENTS"] = str(events_file)
    mock = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            PY,
            str(args.floor / "mock_upstream.py"),
            "--port",
            str(mock_port),
        ],
        stdout=subprocess.DEVNULL,
    )
    gateway = subprocess.Popen(
        ["taskset", "-c", "1", PY, "-c", LAUNCH, str(Path(src).resolve()), "serve"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_port(mock_port, mock)
        _wait_port(port, gateway)
        mock_url = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        _run_client(url, "bench-gpt", args.warm, args.stream)
        direct = _run_client(mock_url, "mock-model", args.n, args.stream)
        if args.burst:
            _burst(args.floor, url, args.burst, args.stream)
        gateway.send_signal(10)  # SIGUSR1: forget the warm-up's events
        times = _run_client(url, "bench-gpt", args.n, args.stream)
        gateway.send_signal(12)  # SIGUSR2: write them
        for _ in range(50):
            time.sleep(0.1)
            if events_file.exists():
                break
        events = json.loads(events_file.read_text())
    finally:
        gateway.terminate()
        mock.terminate()
        gateway.wait(15)
        mock.wait(10)
    classes = _classify(times, events)
    every = [latency for latencies in classes.values() for latency in latencies]
    direct_ms = [(end - begun) * 1000 for begun, end in direct]
    counts = {kind: sum(1 for event in events if event[0] == kind) for kind in KINDS}
    rows = [_summary("direct", direct_ms), _summary("all", every)]
    rows += [_summary(name, classes[name]) for name in ("none", *KINDS) if name in classes]
    seconds = times[-1][1] - times[0][0]
    slow = sum(1 for latency in every if latency > 2 * _pct(direct_ms, 99))
    spool_cpu: dict[str, list[float]] = {}
    for kind, spent, _ in events:
        if kind.startswith("cpu_"):
            spool_cpu.setdefault(kind, []).append(spent * 1e6)
    # Thread CPU (µs) of the spool's calls: a segment's write, and a committed one's delete.
    cpu_us = {kind: {"calls": len(values), "median": round(_pct(values, 50)),
                     "sum_ms": round(sum(values) / 1000, 1)}
              for kind, values in spool_cpu.items()}  # fmt: skip
    print(json.dumps({"src": args.src, "stream": args.stream, "burst": args.burst,
                      "seconds": round(seconds, 2), "events": counts,
                      "over_twice_direct_p99": slow, "spool_thread_cpu_us": cpu_us,
                      "load": os.getloadavg()[0]}))  # fmt: skip
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
