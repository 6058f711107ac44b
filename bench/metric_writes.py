"""Instructions per metric write: in process, in prometheus_client's files, in Farebox's.

Run: `python bench/metric_writes.py [-n 20000]`. For each value class (`plain`: one
process's float; `library`: prometheus_client's multiprocess class, which workers used
before; `farebox`: gateway.metric_files, which they use now) it runs itself under
`valgrind --tool=callgrind` twice, once with 1 `gateway.metrics.add` to a counter child
and once with n + 1, and prints the difference over n: the instructions one add costs,
loop included, the same on a quiet box and a loaded one (docs/performance.md, "A worker's
metrics files"). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MODES = ("plain", "library", "farebox")


def _adds(mode: str, n: int) -> None:
    """Make a counter child under `mode`'s value class and add to it `n` times."""
    if mode != "plain":
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="farebox-metrics-")
    from prometheus_client import Counter, values

    from gateway.metrics import add

    if mode == "farebox":
        from gateway.metric_files import file_values

        values.ValueClass = file_values()
    child = Counter("writes", "writes", ["model"], registry=None).labels("m")
    for _ in range(n):
        add(child, 1.0)


def _counted(mode: str, n: int) -> int:
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    run = subprocess.run(
        [*valgrind, sys.executable, __file__, "--run", mode, "-n", str(n)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from callgrind: {run.stderr[-500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="adds measured per class")
    parser.add_argument("--run", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _adds(args.run, args.n)
        return
    per_add = {mode: (_counted(mode, args.n + 1) - _counted(mode, 1)) // args.n for mode in MODES}
    print(json.dumps({"n": args.n, "instructions_per_add": per_add}))


if __name__ == "__main__":
    main()
