"""CPU seconds of `farebox serve`'s imports, trees alternating, one process per sample.

Run: `python bench/serve_import_cpu.py --src /work/base --src . --pairs 10` (each tree a
checkout with its compiled extensions; bytecode as the tree has it). Each sample is a fresh
interpreter on the gateway's core (`taskset -c 1`, as bench/hotpath.py pins the gateway)
that imports what `serve` imports before it binds, the way it does (bench/hotpath.py's
IMPORT_PROBE: gateway.cli with `serve` as the command, fastapi inside the deferred model
builds, then gateway.app, drain, preflight, server, workers) and prints its own CPU time
(`time.process_time()`, interpreter start included), its module count and whether the
ledger's ORM classes (`gateway.ledger.orm`) and aiohttp were imported. The trees take turns
(ABAB, then BABA), so a burst of load on a shared box falls on both; the ratio of each
pair is printed with the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys, time
sys.argv = ["farebox", "serve"]
import gateway.cli
from gateway import serve_imports
with serve_imports.deferred_model_builds():
    import fastapi
import gateway.app, gateway.drain, gateway.preflight, gateway.server, gateway.workers
cpu = time.process_time()
watched = ("gateway.ledger.orm", "sqlalchemy.orm", "aiohttp")
print(json.dumps([cpu, len(sys.modules), [m for m in watched if m in sys.modules]]))
"""


def sample(tree: Path) -> tuple[float, int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        ["taskset", "-c", "1", sys.executable, "-c", PROBE],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    cpu, modules, loaded = json.loads(done.stdout.splitlines()[-1])
    return float(cpu), int(modules), list(loaded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="a tree (give two)")
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args()
    trees = [Path(src).resolve() for src in args.src]
    cpus: dict[Path, list[float]] = {tree: [] for tree in trees}
    shape: dict[Path, tuple[int, list[str]]] = {}
    for run in range(args.pairs):
        for tree in trees if run % 2 == 0 else trees[::-1]:
            cpu, modules, loaded = sample(tree)
            cpus[tree].append(cpu)
            shape[tree] = (modules, loaded)
    for tree in trees:
        values = cpus[tree]
        modules, loaded = shape[tree]
        print(
            f"{tree}: CPU median {statistics.median(values) * 1000:.0f} ms, min "
            f"{min(values) * 1000:.0f} ({' '.join(f'{v * 1000:.0f}' for v in values)}); "
            f"{modules} modules; loaded: {', '.join(loaded) or 'none of the watched'}"
        )
    if len(trees) == 2:
        base, new = trees
        ratios = sorted(n / b for b, n in zip(cpus[base], cpus[new], strict=True))
        print(f"pair ratios {new.name}/{base.name}: {' '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
