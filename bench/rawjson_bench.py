"""Benchmark `patch_object` (the model alias rewrite) and how long it holds the GIL.

Run: `python bench/rawjson_bench.py` (`--quick` for fewer rounds, `--no-write` to skip
writing bench/results/rawjson.md). Each case patches `model` in a client body, once with
the native walker (`gateway/_rawjson.c`) and once with the str scan it replaced (now the
fallback when the walker is not built: decode the body, `json` raw_decode per value).
"longest stall" is how late a thread that sleeps 0.5 ms in a loop wakes while another
thread patches: what an event loop would feel with the patch offloaded to a worker
thread (Python switches threads every 5 ms, except inside one C call that holds the GIL).
The dev box is shared and noisy: min and median are reported.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

# The repository root (`gateway` when not installed) and this folder (the body builders).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from loop_stall import long_messages, short_messages
from prefix_bench import agent_body

from gateway.rawjson import NATIVE, patch_object

MiB = 1024 * 1024
RESULTS = Path(__file__).resolve().parent / "results" / "rawjson.md"
TICK_S = 0.0005


def cases() -> list[tuple[str, bytes]]:
    """The bodies, as a client sends them (compact JSON)."""
    return [
        ("1 MiB agent history", orjson.dumps(agent_body(MiB))),
        ("31 MiB in 4,000 messages", orjson.dumps(long_messages(seed=1))),
        ("31 MiB in 466,000 short messages", orjson.dumps(short_messages(seed=1))),
    ]


def timed(patch: Callable[[], bytes], rounds: int) -> list[float]:
    """Wall times in ms of `rounds` calls."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        patch()
        times.append((time.perf_counter() - start) * 1000)
    return times


def longest_stall(patch: Callable[[], bytes], rounds: int) -> float:
    """How late (ms) a ticking thread woke at worst while `patch` ran in another thread."""
    worst = 0.0
    done = threading.Event()

    def tick() -> None:
        nonlocal worst
        while not done.is_set():
            start = time.perf_counter()
            time.sleep(TICK_S)
            worst = max(worst, time.perf_counter() - start - TICK_S)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        for _ in range(rounds):
            worker = threading.Thread(target=patch)
            worker.start()
            worker.join()
    finally:
        done.set()
        ticker.join()
    return worst * 1000


def rows(rounds: int) -> list[str]:
    """One table row per body and implementation."""
    out = []
    for name, raw in cases():
        for label, native in (("native walker", True), ("str scan (old)", False)):

            def patch(raw: bytes = raw, native: bool = native) -> bytes:
                return patch_object(raw, {"model": "upstream-name"}, native=native)

            assert patch() == patch_object(raw, {"model": "upstream-name"}, native=False)
            times = timed(patch, rounds)
            stall = longest_stall(patch, max(1, rounds // 3))
            out.append(
                f"| {name} | {label} | {min(times):.2f} | {statistics.median(times):.2f} "
                f"| {stall:.2f} |"
            )
            print(out[-1], flush=True)
    return out


def main() -> None:
    """Run the benchmark, print the table and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds per case, not 10")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = parser.parse_args()
    if not NATIVE:
        sys.exit("the native walker is not built: run `pip install -e .` with a C compiler")
    rounds = 3 if args.quick else 10
    header = [
        "# patch_object benchmark (model alias rewrite)",
        "",
        f"Command: `python bench/rawjson_bench.py` ({rounds} rounds per case)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at start, Python {platform.python_version()}",
        "",
        "| body | implementation | min ms | median ms | longest stall ms |",
        "|---|---|---:|---:|---:|",
    ]
    print("\n".join(header), flush=True)
    table = rows(rounds)
    if not args.no_write:
        RESULTS.write_text("\n".join(header + table) + "\n")


if __name__ == "__main__":
    main()
