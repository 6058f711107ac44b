"""Seconds from launching `farebox serve` to its first chat request answered 200.

Run: `python bench/first_request.py --runs 8 --base REF` (REF: a commit to compare with,
e.g. `HEAD~1`; without it only this tree is measured). As `bench/hotpath.py` measures
start-up (issue 12's "first request served < 1.5 s"): one gateway pinned to core 1 with
the SQLite ledger, the counting mock upstream on core 0, the clock started at launch;
the probe here polls every 10 ms (the hot-path bench's, 50 ms). With `--base`, runs of the
two trees alternate, so a burst of load on this shared box falls on both. `--src DIR`
compares a checkout instead (a `git worktree` with uncommitted changes). `--restart`
starts each tree on a ledger it already migrated (a restart), not a fresh one.

"CPU by then" is the gateway's own process tree; the start-up steps `farebox serve` runs in
forked children it has already reaped (the ledger's migration, the price map's digest) are
counted apart, as "steps": they hold the wall clock on a one-core pin all the same.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from hotpath_procs import (  # noqa: E402
    GATEWAY_CORE,
    LOAD_CORE,
    TICK_S,
    cpu_ticks,
    free_port,
    launch,
    rss_kib,
)
from hotpath_targets import FAREBOX_CONFIG, MODEL, UPSTREAM_MODEL, chat_url, start_mock  # noqa: E402

FLOOR = ROOT.parent / "shared" / "perf-floor"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def export(ref: str, into: Path) -> Path:
    """The `gateway` package at `ref`, with this tree's compiled extension beside it."""
    archive = subprocess.run(
        ["git", "archive", ref, "gateway"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    for built in (ROOT / "gateway").glob("_*.so"):
        shutil.copy(built, into / "gateway")
    # As `make` leaves this tree: compiled, so neither side compiles at launch (written even
    # under PYTHONDONTWRITEBYTECODE, which only stops the import system from writing).
    compileall.compile_dir(into / "gateway", quiet=1)
    return into


def reaped_cpu_s(pid: int) -> float:
    """CPU seconds of the children `pid` has waited for (cutime + cstime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) * TICK_S


def first_200(
    tree: Path, work: Path, mock_url: str, name: str, data: str
) -> tuple[float, float, float, float]:
    """Launch `farebox serve` from `tree`: seconds until a chat request answers 200, the
    CPU seconds it spent by then (steadier than wall time on a busy box), its RSS, MiB, and
    the CPU seconds of its reaped start-up steps."""
    config = work / f"{name}.yaml"
    config.write_text(
        FAREBOX_CONFIG.format(model=MODEL, upstream=UPSTREAM_MODEL, base=f"{mock_url}/v1")
    )
    port = free_port()
    settings = {
        "FAREBOX_CONFIG": str(config),
        "FAREBOX_DATA_DIR": str(work / f"{data}-data"),
        "PYTHONPATH": str(tree),  # ahead of the editable install's finder
    }
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    proc = launch(name, command, GATEWAY_CORE, work, settings)
    try:
        with httpx.Client(timeout=5) as client:
            while time.time() - proc.launched < 120:
                try:
                    if client.post(chat_url(port), json=BODY).status_code == 200:
                        wall = time.time() - proc.launched
                        pid = proc.popen.pid
                        cpu, steps = cpu_ticks(pid) * TICK_S, reaped_cpu_s(pid)
                        return wall, cpu, rss_kib(pid) / 1024, steps
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
        raise RuntimeError(f"{name}: no 200 within 120 s; see {work / name}.log")
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="launches per tree")
    parser.add_argument("--base", help="a commit to measure side by side with this tree")
    parser.add_argument("--src", help="a checkout to measure side by side (not a commit)")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="each tree restarts on its own ledger (migrated by an unmeasured first launch), "
        "instead of a fresh one each launch",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = {"this tree": ROOT}
        if args.base:
            trees = {args.base: export(args.base, work / "base"), **trees}
        if args.src:
            trees = {args.src: Path(args.src).resolve(), **trees}
        mock, mock_url = start_mock(sys.executable, FLOOR, work, LOAD_CORE)
        seconds: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in trees}
        try:
            if args.restart:  # the ledger each tree restarts on, migrated once
                for index, tree in enumerate(trees.values()):
                    first_200(tree, work, mock_url, f"migrate-{index}", f"tree-{index}")
            for run in range(args.runs):
                order = list(trees.items())
                for name, tree in order if run % 2 else order[::-1]:
                    index = list(trees).index(name)
                    data = f"tree-{index}" if args.restart else f"t{run}-{index}"
                    seconds[name].append(first_200(tree, work, mock_url, f"t{run}-{index}", data))
                    time.sleep(0.3)
        finally:
            mock.stop()
    for name, values in seconds.items():
        walls, cpus, rss, steps = ([value[i] for value in values] for i in range(4))
        print(
            f"{name}: median {statistics.median(walls):.2f} s "
            f"({' '.join(f'{v:.2f}' for v in walls)}); CPU by then "
            f"{statistics.median(cpus):.2f} s ({' '.join(f'{v:.2f}' for v in cpus)}); "
            f"steps {statistics.median(steps):.2f} s ({' '.join(f'{v:.2f}' for v in steps)}); "
            f"RSS {statistics.median(rss):.0f} MiB"
        )


if __name__ == "__main__":
    main()
