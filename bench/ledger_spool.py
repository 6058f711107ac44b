"""Thread CPU of one spool segment's write, two trees' `Spool` side by side in one process.

Run: `python bench/ledger_spool.py --base /work/wt-base [--new .] [-n 140] [--rounds 200]
[--line-bytes 1000]`.

Loads `gateway/ledger/spool.py` of each tree by its path (the rest of `gateway` is this
checkout's), then in one worker thread, as the writer's `to_thread` runs it, writes a
segment of `-n` lines with each tree's `Spool.append` (the writer's method; a tree that
has none: `write_encoded`) in turn (the order swapped every round, 10 ms apart) and reads
the thread's CPU (`time.thread_time`: user and kernel) around each write, and around its
`delete` after (the commit's side: an unlink per segment, or a log's bookkeeping). On this
shared box the two
trees meet the same load in the same rounds; the pairs count says in how many rounds the
new tree's write cost less. Prints one JSON object: per tree the median, mean and 10th
percentile in microseconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType


def _load(tree: Path, name: str) -> ModuleType:
    """The tree's spool module under `name` (registered: its dataclasses need that)."""
    spec = importlib.util.spec_from_file_location(name, tree / "gateway/ledger/spool.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("-n", type=int, default=140, help="lines per segment")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--line-bytes", type=int, default=1000)
    args = parser.parse_args()
    line = b'{"kind":"request","data":{"x":"' + b"y" * args.line_bytes + b'"}}\n'
    lines = [line] * args.n
    work = Path(tempfile.mkdtemp(prefix="ledger-spool-"))
    spools = {
        "base": _load(args.base, "spool_base").Spool(work / "base"),
        "new": _load(args.new, "spool_new").Spool(work / "new"),
    }
    cpu: dict[str, list[float]] = {name: [] for name in spools}
    deletes: dict[str, list[float]] = {name: [] for name in spools}

    def run() -> None:
        for index in range(args.rounds):
            for name in ("base", "new") if index % 2 else ("new", "base"):
                spool = spools[name]
                write = getattr(spool, "append", spool.write_encoded)
                started = time.thread_time()
                segment = write(lines, [])
                cpu[name].append(time.thread_time() - started)
                started = time.thread_time()
                spool.delete(segment)
                deletes[name].append(time.thread_time() - started)
                time.sleep(0.01)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    summary: dict[str, object] = {"n": args.n, "rounds": args.rounds}
    for name, values in cpu.items():
        ordered = sorted(values)
        summary[name] = {
            "median_us": round(statistics.median(values) * 1e6),
            "mean_us": round(statistics.mean(values) * 1e6),
            "p10_us": round(ordered[len(ordered) // 10] * 1e6),
            "delete_median_us": round(statistics.median(deletes[name]) * 1e6),
            "write_and_delete_mean_us": round(
                statistics.mean(map(sum, zip(values, deletes[name], strict=True))) * 1e6
            ),
        }
    summary["new_lower_in"] = sum(
        new < base for new, base in zip(cpu["new"], cpu["base"], strict=True)
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
