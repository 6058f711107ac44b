"""User and kernel CPU per request of the serving loop's thread, Farebox beside minproxy.py.

Run: `python bench/whole_user_kernel.py [-n 3000] [--warm 500] [-c 1] [--stream]
[--rounds 3] [--src DIR]`.

Starts perf-floor's mock upstream (core 0) and, in turn within each round (so both share
the same minutes of a shared box), perf-floor's `minproxy.py` and `farebox serve` (this
checkout, or `--src`) pinned to core 1, with bench/pipeline_cpu.py's config (an alias
renamed to the mock's model, SQLite ledger). Each is warmed with `--warm` requests, then
loaded with `-n` at concurrency `-c` by the floor's load generator (core 0). From
/proc/PID/task/TID/stat it reads utime and stime (clock ticks) of the process's main
thread (the event loop's) and of all its other threads together, before and after, and
prints per request, in microseconds:

- `loop_user_us` / `loop_kernel_us`: the loop thread's time in Python and C, and in the
  kernel (system calls: the socket reads and writes, epoll, clocks);
- `other_us`: every other thread (the ledger's database and spool threads, pools).

The loop's kernel time is the part no change in Python cuts: at concurrency 1 a proxy
reads and writes each socket once a request; what is left above minproxy's is user time.
One JSON line per proxy and round, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_cpu import CONFIG, LAUNCH, PY, _free_port, _wait_port

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[int, tuple[int, int]]:
    """utime and stime (ticks) of each thread of `pid`."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]), int(fields[12]))
    return out


def _load(args: argparse.Namespace, url: str, model: str, n: int) -> dict[str, Any]:
    floor = args.floor
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = ["taskset", "-c", "0", PY, str(floor / "loadgen.py"), "--url", url, "--model", model]
    cmd += ["-c", str(args.c), "-n", str(n), "--json-out", str(out), "--max-seconds", "120"]
    if args.stream:
        cmd += ["--stream", "--drain"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


def _measure(args: argparse.Namespace, name: str, cmd: list[str], port: int, env: dict[str, str]):
    proc = subprocess.Popen(
        ["taskset", "-c", "1", *cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        _load(args, url, args.model, args.warm)
        before = _threads(proc.pid)
        result = _load(args, url, args.model, args.n)
        after = _threads(proc.pid)
    finally:
        proc.terminate()
        proc.wait(15)
    sent = int(result.get("sent") or args.n)
    scale = 1e6 / TICK / sent

    def spent(tid: int, which: int) -> float:
        return (after[tid][which] - before.get(tid, (0, 0))[which]) * scale

    main = proc.pid
    others = sum(spent(t, 0) + spent(t, 1) for t in after if t != main)
    return {
        "name": name,
        "sent": sent,
        "loop_user_us": round(spent(main, 0), 1),
        "loop_kernel_us": round(spent(main, 1), 1),
        "other_us": round(others, 1),
        "p50_ms": (result.get("lat_ms") or result.get("latency_ms") or {}).get("p50"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("-c", type=int, default=1)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", help="run the gateway from this checkout instead")
    args = parser.parse_args()
    mock_port = _free_port()
    mock = subprocess.Popen(
        ["taskset", "-c", "0", PY, str(args.floor / "mock_upstream.py"), "--port", str(mock_port)],
        stdout=subprocess.DEVNULL,
    )
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(CONFIG.format(port=mock_port))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    base_env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    base_env["FAREBOX_LOG_LEVEL"] = "warning"
    rows: list[dict[str, Any]] = []
    try:
        _wait_port(mock_port, mock)
        upstream = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        for _ in range(args.rounds):
            port = _free_port()
            args.model = "mock-model"
            cmd = [PY, str(args.floor / "minproxy.py"), str(port), upstream]
            rows.append(_measure(args, "minproxy", cmd, port, base_env))
            print(json.dumps(rows[-1]), flush=True)
            port = _free_port()
            args.model = "bench-gpt"
            farebox = [shutil.which("farebox", path=str(Path(PY).parent)) or "farebox"]
            if args.src:
                farebox = [PY, "-c", LAUNCH, args.src]
            env = base_env | {"FAREBOX_PORT": str(port)}
            rows.append(_measure(args, "farebox", [*farebox, "serve"], port, env))
            print(json.dumps(rows[-1]), flush=True)
            time.sleep(0.5)
    finally:
        mock.terminate()
        mock.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    summary: dict[str, Any] = {"c": args.c, "stream": args.stream, "n": args.n}
    for name in ("minproxy", "farebox"):
        mine = [row for row in rows if row["name"] == name]
        summary[name] = {
            key: statistics.median(row[key] for row in mine)
            for key in ("loop_user_us", "loop_kernel_us", "other_us")
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
