"""Concurrency 1: what the loop schedules, and which calls are system calls, by caller.

Run: `python bench/c1_calls.py [-n 1000] [--stream] [--src DIR] [--min 0.05]`.

Starts perf-floor's mock upstream on core 0 and `farebox serve` (this checkout, or
`--src`) on core 1 with bench/pipeline_cpu.py's config, under a launcher that counts, on
the loop's thread, each call by its two innermost Python callers:

- the C calls that are a system call each on CPython 3.11 / this VM:
  `asyncio.get_running_loop`, `get_event_loop`, `_get_running_loop` and `current_task` (a
  `getpid`: the running loop's fork check), `time.thread_time` and `time.process_time`
  (CPU clocks are `clock_gettime` syscalls, not the vDSO), `os.getpid` (`sys.setprofile`);
- the loop's `call_soon`, `call_later` and `call_at` (uvloop's `Loop` methods overridden):
  on uvloop each timer made and fired or cancelled is a handle closed, which makes the
  loop's next poll non-blocking (one more `epoll_pwait`).

It loads the gateway with the load generator at concurrency 1 (`--warm` requests first,
not counted), then `-n` requests counted, and prints one JSON line: the calls per
request, by name and caller, at least `--min` per request (periodic work, which does not
scale with requests, shows as a fraction that grows as the gateway slows). The profile
hook slows the gateway several-fold: read counts, never times. `strace -f -c`
(`bench/c1_path.py --strace`) gives the syscalls themselves; this says who makes them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from c1_path import _loadgen, _written
from pipeline_cpu import CONFIG, _free_port, _wait_port

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
LAUNCH = """
import sys, os
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')
                    and 'editable' not in getattr(f, '__name__', '')]
sys.path.insert(0, sys.argv.pop(1))
import asyncio, collections, json, signal, time, uvloop
import _asyncio  # after asyncio: imported first, asyncio.current_task no longer sees its tasks
counts = collections.Counter()
def caller(frame):
    chain = []
    while frame is not None and len(chain) < 2:
        code = frame.f_code
        chain.append('%s:%s:%s' % ('/'.join(code.co_filename.split('/')[-2:]), frame.f_lineno,
                                    code.co_name))
        frame = frame.f_back
    return ' < '.join(chain)
SYSCALLS = {id(f): name for f, name in [
    (_asyncio.get_running_loop, 'get_running_loop'), (_asyncio.get_event_loop, 'get_event_loop'),
    (_asyncio._get_running_loop, '_get_running_loop'), (asyncio.current_task, 'current_task'),
    (time.thread_time, 'thread_time'), (time.process_time, 'process_time'),
    (os.getpid, 'os.getpid')]}
def profile(frame, event, arg):
    if event == 'c_call':
        name = SYSCALLS.get(id(arg))
        if name is not None:
            counts[(name, caller(frame))] += 1
sys.setprofile(profile)  # the loop's thread only: the ledger's threads are not counted
def counted(name, method):
    def wrapper(self, *args, **kwargs):
        counts[(name, caller(sys._getframe(1)))] += 1
        return method(self, *args, **kwargs)
    return wrapper
for name in ('call_soon', 'call_later', 'call_at'):
    setattr(uvloop.Loop, name, counted(name, getattr(uvloop.Loop, name)))
def reset(*_):
    counts.clear()
def dump(*_):
    rows = [[name, where, n] for (name, where), n in counts.most_common()]
    with open(os.environ['C1_CALLS'] + '.part', 'w') as out:
        json.dump(rows, out)
    os.replace(os.environ['C1_CALLS'] + '.part', os.environ['C1_CALLS'])
signal.signal(signal.SIGUSR1, reset)
signal.signal(signal.SIGUSR2, dump)
from gateway.cli import main
main()
"""


def _per_request(rows: list[list[Any]], sent: int, least: float) -> dict[str, float]:
    """`name @ caller`: calls per request, most first, those at least `least`."""
    found = {f"{name} @ {where}": round(n / sent, 3) for name, where, n in rows}
    return {key: value for key, value in found.items() if value >= least}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--src", default=str(ROOT), help="the checkout to serve from")
    parser.add_argument("--min", type=float, default=0.05, help="least calls per request shown")
    args = parser.parse_args()
    mock_port, port = _free_port(), _free_port()
    mock = subprocess.Popen(
        ["taskset", "-c", "0", PY, str(args.floor / "mock_upstream.py"), "--port", str(mock_port)],
        stdout=subprocess.DEVNULL,
    )
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(CONFIG.format(port=mock_port))
    counts = Path(tempfile.mkstemp(suffix=".calls.json")[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning", "FAREBOX_PORT": str(port), "C1_CALLS": str(counts)}
    command = ["taskset", "-c", "1", PY, "-c", LAUNCH, str(Path(args.src).resolve()), "serve"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        _wait_port(mock_port, mock)
        _wait_port(port, proc)
        _loadgen(args.floor, url, "bench-gpt", args.warm, 0, args.stream)
        os.kill(proc.pid, signal.SIGUSR1)
        sent = _loadgen(args.floor, url, "bench-gpt", args.n, 0, args.stream)["sent"]
        os.kill(proc.pid, signal.SIGUSR2)
        _written(counts)
        rows = json.loads(counts.read_text())
        row = {"src": args.src, "stream": args.stream, "sent": sent}
        print(json.dumps(row | {"per_request": _per_request(rows, sent, args.min)}))
    finally:
        for child in (proc, mock):
            child.terminate()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        counts.unlink(missing_ok=True)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
