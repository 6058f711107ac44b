"""Memory of `farebox serve`: RSS, PSS and USS of each process, phase by phase.

    python bench/hotpath_memory.py [--workers 1 2] [--requests 3000] [--src DIR] [--env K=V]
        [--bench tiny|quick|full] [--rounds N] [--this-too]

bench/hotpath.py reports the peak RSS of each process; RSS counts every page a process
maps, shared ones included, so with `--workers N` each worker is charged the pages it
shares with the supervisor and its siblings in full. This adds PSS (shared pages divided
among their users) and USS (pages of this process alone, what a worker really adds)
from /proc/PID/smaps_rollup, at start and after each load phase: small requests at c=64
whole and streamed, then 1 MB agent steps and 1 MB fresh prompts at c=1, on the bench's
instant mock and its configuration (SQLite ledger; Redis state with `--workers 1` or more,
in-process state with `--workers 0`: no --workers flag, as the bench's farebox-sqlite). Each
reading waits until the gateway's CPU goes quiet (the ledger has written the phase's rows).
Each cell also gives the process's peak RSS so far (VmHWM, which bench/hotpath.py's
Processes table reports). `--src DIR` serves another checkout (e.g. a
`git worktree` of the commit before a change), `--env NAME=VALUE[,NAME=VALUE]` sets
variables for the gateway (e.g. `MALLOC_ARENA_MAX=8`); both repeat, and `--this-too` adds
this tree as it is, so A/B runs alternate in one job.
Loopback only, one to two minutes per run.

`--bench MODE` (tiny, quick or full) replays instead what bench/hotpath.py does to its
farebox-sqlite process, on one process: the first request, the unmeasured c=64 pre-warm,
then each scenario (small c=1 and c=64, whole and streamed, the 1 MB agent step and fresh
prompt) for the mode's passes, each run bounded in time as there (so loadgen abandons the
requests in flight at its end); it prints RSS after each run and the peak RSS so far (the
kernel's VmHWM), as the bench's Processes table reads it. A full replay takes about a minute on a
quiet box; `--seconds S` bounds each run by S instead (on a loaded box a 3 s run sends a
fraction of the mode's requests). `--stats DIR` puts bench/memprobe on the gateway's path
and writes what its memory is made of to DIR after each phase or run (glibc's heaps,
pymalloc's arenas, SQLite's use; see bench/memprobe/sitecustomize.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hotpath import MODES
from hotpath_load import (
    ALL,
    THROUGHPUT,
    Budget,
    LoadSetup,
    LoadWorker,
    probe_ready,
    settle,
    write_history,
)
from hotpath_load import measure as measure_run
from hotpath_procs import GATEWAY_CORE, LOAD_CORE, RssWatch, cpu_ticks, wait_http
from hotpath_targets import MODEL, start_farebox, start_mock

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


def peak_mib(pid: int) -> float:
    """The process's peak RSS so far in MiB (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


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


def measure(workers: int, requests: int, workdir: Path, env: dict[str, str]) -> None:
    mock, mock_url = start_mock(sys.executable, FLOOR, workdir, LOAD_CORE)
    history = write_history(workdir / "history-1mb.json")
    both = f"{LOAD_CORE},{GATEWAY_CORE}"
    core = GATEWAY_CORE if workers <= 1 else both
    with overrides(env):  # 0: no --workers, in-process state (the bench's farebox-sqlite)
        target = start_farebox(f"farebox-{workers}", workdir, mock_url, core, None, workers or None)
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
        shown = " ".join(f"{k}={v}" for k, v in env.items()) or "no overrides"
        print(f"\n{workers} worker(s), {shown}: MiB after each phase (RSS / PSS / USS, peak RSS)")
        for name, options in phases:
            if options:
                load(target.url, history, *options)
                settle(target.proc.pid, cpu_ticks(target.proc.pid))  # the ledger's backlog
            cells = [
                f"{who} {m['rss']:.0f} / {m['pss']:.0f} / {m['uss']:.0f}, {peak_mib(pid):.0f}"
                for who, pid in processes(target.proc.pid)
                for m in [memory_mib(pid)]
            ]
            print(f"  {name:24s} " + "; ".join(cells), flush=True)
            if "MEMPROBE_OUT" in env:
                for _, pid in processes(target.proc.pid):
                    ask_stats(pid)
    finally:
        target.stop()
        mock.stop()


def replay(mode: str, workdir: Path, env: dict[str, str], seconds: float | None) -> float:
    """bench/hotpath.py's runs against one farebox-sqlite process; returns its peak RSS.

    `seconds`: each run's bound instead of the mode's (on a loaded box a 3 s run sends a
    tenth of what it does on a quiet one; a longer bound sends the mode's full counts)."""
    budget = MODES[mode]
    if seconds is not None:
        budget = dataclasses.replace(budget, seconds=seconds)
    mock, mock_url = start_mock(sys.executable, FLOOR, workdir, LOAD_CORE)
    worker = LoadWorker(sys.executable, FLOOR, LOAD_CORE)
    history = write_history(workdir / "history-1mb.json")
    setup = LoadSetup(FLOOR, sys.executable, history, LOAD_CORE, mock_url, worker, mock.popen.pid)
    with overrides(env):
        target = start_farebox("farebox-sqlite", workdir, mock_url, GATEWAY_CORE, None, None)
    assert target.proc is not None
    pid = target.proc.pid
    watch = RssWatch(pid).start()
    shown = " ".join(f"{k}={v}" for k, v in env.items()) or "no overrides"
    print(f"\n--bench {mode}, {shown}: RSS after each run, MiB (peak RSS so far)", flush=True)
    try:
        ready = probe_ready(setup, target.url, MODEL, target.proc.launched, pid)
        print(f"  first 200 after {ready:.2f} s: {memory_mib(pid)['rss']:.1f}", flush=True)
        runs = [(s, Budget(2, 0, 256, 0, warmup_c64=0)) for s in THROUGHPUT if mode != "tiny"]
        runs += [(s, budget) for _ in range(budget.passes) for s in ALL]
        for scenario, each in runs:
            run = measure_run(setup, "farebox-sqlite", pid, target.url, MODEL, scenario, each)
            watch.sample()
            rss, peak = memory_mib(pid)["rss"], watch.per_process_mib()
            label = f"{scenario.key} ({run.completed}/{run.sent})"
            print(f"  {label:24s} {rss:6.1f} ({peak:.1f})", flush=True)
            if "MEMPROBE_OUT" in env:
                ask_stats(pid)
        watch.stop()
        print(f"  peak RSS {watch.per_process_mib():.1f} MiB", flush=True)
        return watch.per_process_mib()
    finally:
        watch.stop()
        target.stop()
        worker.close()
        mock.stop()


def ask_stats(pid: int) -> None:
    """Have bench/memprobe write the process's allocator statistics (--stats)."""
    os.kill(pid, signal.SIGUSR1)
    time.sleep(1)  # written on the process's main thread, between two of its bytecodes


def with_stats(env: dict[str, str], folder: Path, index: int) -> dict[str, str]:
    """`env` with bench/memprobe first on the gateway's PYTHONPATH (--stats)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [str(ROOT / "bench" / "memprobe"), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": ":".join(paths), "MEMPROBE_OUT": str(folder / f"run{index}")}


@contextlib.contextmanager
def overrides(env: dict[str, str]) -> Iterator[None]:
    """`env` in os.environ while the gateway is launched (launch copies the environment)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def variants(srcs: list[str], envs: list[str]) -> list[dict[str, str]]:
    """One environment per run: each --src (PYTHONPATH), each --env, or this tree as is."""
    runs = [{"PYTHONPATH": str(Path(src).resolve())} for src in srcs]
    for item in envs:  # NAME=VALUE[,NAME=VALUE...]: one run with all of them
        runs.append(dict(pair.partition("=")[::2] for pair in item.split(",")))
    return runs or [{}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--src", action="append", default=[], help="serve this checkout")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for a run")
    parser.add_argument("--this-too", action="store_true", help="also run this tree as is")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the runs, alternating")
    parser.add_argument("--bench", choices=sorted(MODES), help="replay bench/hotpath.py's runs")
    parser.add_argument("--seconds", type=float, help="with --bench: each run's time bound")
    parser.add_argument(
        "--stats", type=Path, help="write allocator statistics here after each phase or run"
    )
    args = parser.parse_args()
    runs = variants(args.src, args.env) + ([{}] if args.this_too else [])
    if args.stats:
        runs = [with_stats(env, args.stats.resolve(), i) for i, env in enumerate(runs)]
    if args.bench:
        peaks: dict[int, list[float]] = {}
        for _ in range(args.rounds):
            for index, env in enumerate(runs):
                with tempfile.TemporaryDirectory(prefix="farebox-memory-") as folder:
                    peaks.setdefault(index, []).append(
                        replay(args.bench, Path(folder), env, args.seconds)
                    )
        for index, env in enumerate(runs):
            shown = " ".join(f"{k}={v}" for k, v in env.items()) or "no overrides"
            print(f"peak RSS, {shown}: {', '.join(f'{p:.1f}' for p in peaks[index])} MiB")
        return 0
    for _ in range(args.rounds):
        for workers in args.workers:
            for env in runs:
                with tempfile.TemporaryDirectory(prefix="farebox-memory-") as folder:
                    measure(workers, args.requests, Path(folder), env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
