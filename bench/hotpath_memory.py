"""Memory of `farebox serve`: RSS, PSS and USS of each process, phase by phase.

    python bench/hotpath_memory.py [--workers 1 2] [--requests 3000]

bench/hotpath.py reports the peak RSS of each process; RSS counts every page a process
maps, shared ones included, so with `--workers N` each worker is charged the pages it
shares with the supervisor and its siblings in full. This adds PSS (shared pages divided
among their users) and USS (pages of this process alone, what a worker really adds)
from /proc/PID/smaps_rollup, at start and after each load phase: small requests at c=64
whole and streamed, then 1 MB agent steps and 1 MB fresh prompts at c=1, on the bench's
instant mock and its configuration (SQLite ledger; Redis state for 2 workers).
Loopback only, one to two minutes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hotpath_load import write_history
from hotpath_procs import GATEWAY_CORE, LOAD_CORE, wait_http
from hotpath_targets import MODEL, REDIS_URL, start_farebox, start_mock

ROOT = Path(__file__).resolve().parents[1]
FLOOR = Path(os.environ.get("FAREBOX_PERF_FLOOR", ROOT.parent / "shared" / "perf-floor"))
FIELDS = {"Rss:": "rss", "Pss:": "pss", "Private_Clean:": "uss", "Private_Dirty:": "uss"}


def memory_mib(pid: int) -> dict[str, float]:
    """RSS, PSS and USS of one process in MiB, from /proc/PID/smaps_rollup."""
    found = {"rss": 0.0, "pss": 0.0, "uss": 0.0}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in FIELDS:
            found[FIELDS[parts[0]]] += int(parts[1]) / 1024
    return found


def processes(pid: int) -> list[tuple[str, int]]:
    """The supervisor (when there are workers) and each process that serves."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    if not children:
        return [("gateway", pid)]
    return [("supervisor", pid), *((f"worker {i}", int(c)) for i, c in enumerate(children))]


def load(url: str, history: Path, *options: str) -> None:
    command = ["taskset", "-c", LOAD_CORE, sys.executable, str(FLOOR / "loadgen.py")]
    command += ["--url", url, "--model", MODEL, *options]
    subprocess.run(command, check=True, capture_output=True, cwd=history.parent)


def measure(workers: int, requests: int, workdir: Path) -> None:
    mock, mock_url = start_mock(sys.executable, FLOOR, workdir, LOAD_CORE)
    history = write_history(workdir / "history-1mb.json")
    both = f"{LOAD_CORE},{GATEWAY_CORE}"
    core = GATEWAY_CORE if workers == 1 else both
    target = start_farebox(f"farebox-{workers}", workdir, mock_url, core, None, workers, REDIS_URL)
    assert target.proc is not None
    try:
        wait_http(target.url.replace("/v1/chat/completions", "/readyz"), target.proc)
        time.sleep(2)
        small = ["-c", "64", "-n", str(requests)]
        large = ["-n", "40", "--history-file", str(history), "--history-mode"]
        phases = [
            ("started", []),
            (f"{requests} whole, c=64", small),
            (f"{requests} streamed, c=64", [*small, "--stream", "--drain"]),
            ("40 1 MB agent steps", [*large, "agent", "--task-prefix", "m", "--tasks", "1"]),
            ("40 1 MB fresh prompts", [*large, "fresh"]),
        ]
        print(f"\n{workers} worker(s): MiB after each phase (RSS / PSS / USS)")
        for name, options in phases:
            if options:
                load(target.url, history, *options)
            cells = [
                f"{who} {m['rss']:.0f} / {m['pss']:.0f} / {m['uss']:.0f}"
                for who, pid in processes(target.proc.pid)
                for m in [memory_mib(pid)]
            ]
            print(f"  {name:24s} " + "; ".join(cells), flush=True)
    finally:
        target.stop()
        mock.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    for workers in args.workers:
        with tempfile.TemporaryDirectory(prefix="farebox-memory-") as folder:
            measure(workers, args.requests, Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
