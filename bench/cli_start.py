"""CPU that a `farebox` command line costs before it does its work, per tree.

Run: `python bench/cli_start.py [--src /work/base --src .] [-n 7] [--json]` (each tree a
checkout with its compiled extensions; default: this one). Each command line below runs
`-n` times per tree as `python -m gateway ...`, the trees in turns (so a busy spell of the
box hits each alike); printed: the median user+system CPU of the whole process (from
wait4), and whether it loaded SQLAlchemy. Nothing needs a server: `report --url` asks a
closed port and fails at once, which is the remote report's start and exit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

COMMAND_LINES = (
    ["--help"],
    ["--version"],
    ["sim", "--help"],
    ["keys", "--help"],
    ["policy", "--help"],
    ["lint", "--help"],
    ["cost", "--help"],
    ["audit", "--help"],
    ["report", "--help"],
    ["report", "--url", "http://127.0.0.1:9", "--api-key", "fbx-none", "--json"],
)

# Runs the command line as `python -m gateway` would, then says whether SQLAlchemy came in.
PROBE = """
import atexit, os, runpy, sys
fd = int(os.environ.pop("CLI_START_FD"))
atexit.register(lambda: os.write(fd, b"1" if "sqlalchemy" in sys.modules else b"0"))
sys.argv = ["farebox", *sys.argv[1:]]
runpy.run_module("gateway", run_name="__main__", alter_sys=True)
"""


def run_once(tree: Path, argv: list[str]) -> tuple[float, bool]:
    """One process's CPU seconds (user + system) and whether it imported SQLAlchemy."""
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "120", "CLI_START_FD": str(write)}
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, *argv],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write,),
    )
    os.close(write)
    _, _, usage = os.wait4(process.pid, 0)
    with os.fdopen(read, "rb") as pipe:
        loaded = pipe.read() == b"1"
    return usage.ru_utime + usage.ru_stime, loaded


def measure(trees: list[Path], runs: int) -> dict[str, dict[str, dict[str, object]]]:
    spent: dict[tuple[str, str], list[float]] = {}
    loaded: dict[tuple[str, str], bool] = {}
    for _ in range(runs):
        for argv in COMMAND_LINES:
            for tree in trees:  # in turns: the same minutes for every tree
                key = (str(tree), " ".join(argv))
                seconds, sqlalchemy = run_once(tree, argv)
                spent.setdefault(key, []).append(seconds)
                loaded[key] = loaded.get(key, False) or sqlalchemy
    found: dict[str, dict[str, dict[str, object]]] = {}
    for key, times in spent.items():
        tree_name, line = key
        found.setdefault(line, {})[tree_name] = {
            "cpu_ms_median": round(statistics.median(times) * 1000, 1),
            "cpu_ms_min": round(min(times) * 1000, 1),
            "cpu_ms_max": round(max(times) * 1000, 1),
            "sqlalchemy": loaded[key],
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", action="append", default=[], help="a tree (repeatable)")
    parser.add_argument("-n", type=int, default=7, help="runs of each command line per tree")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()
    trees = [Path(tree).resolve() for tree in args.src or ["."]]
    found = measure(trees, args.n)
    if args.json:
        print(json.dumps(found, indent=2))
        return
    print(f"CPU per process, ms (median of {args.n}; min-max), and SQLAlchemy loaded:")
    for line, by_tree in found.items():
        print(f"farebox {line}")
        for tree, row in by_tree.items():
            mark = "sqlalchemy" if row["sqlalchemy"] else "-"
            spread = f"{row['cpu_ms_min']}-{row['cpu_ms_max']}"
            print(f"  {tree}: {row['cpu_ms_median']} ({spread})  {mark}")


if __name__ == "__main__":
    main()
