"""What building a request's ledger row costs: `ledger_record` alone, trees alternating.

Run: `python bench/tail_row_build.py [--src DIR ...] [--pairs 5] [-n 50000]`.

Builds the context tests/unit/test_ledger_record_build.py builds (a parsed small request,
a priced usage, a `BookedCost.of` its cost) once, then times `ledger_record(ctx, booked)`
`-n` times in a fresh process per tree (this checkout first, then each `--src`), the
trees alternating `--pairs` times. Prints each run's best-of-5 microseconds per row (one
process's CPU time, `time.process_time`), then the per-tree medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, time
from checkout import use_checkout
use_checkout({src!r})
from decimal import Decimal
from gateway.config import parse_config
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.identify import identify
from gateway.pipeline.parse import parse
from gateway.pipeline.record import BookedCost, ledger_record
from gateway.pricing import ModelPrice, PriceSheet, cost_of
from gateway.usage import Usage

config = parse_config("models:\\n  m:\\n    model: up\\n    base_url: http://h/v1\\n")
ctx = RequestContext(raw_body=b'{{"model":"m","messages":[{{"role":"user","content":"x"}}]}}',
                     headers={{"x-farebox-team": "t1"}}, request_id="req-1")
parse(ctx); identify(ctx); decide(ctx, config)
usage = Usage(prompt_tokens=120, cached_tokens=64, completion_tokens=20)
sheet = PriceSheet(input=Decimal("0.0000025"), output=Decimal("0.00001"))
ctx.usage = usage
ctx.cost = cost_of(ModelPrice(model="m", standard={{0: sheet}}), usage)
ctx.status_code, ctx.tier_served = 200, "standard"
booked = BookedCost.of(ctx.cost)
n = {n}
best = float("inf")
for _ in range(5):
    start = time.process_time()
    for _ in range(n):
        ledger_record(ctx, booked)
    best = min(best, time.process_time() - start)
print(best / n * 1e6)
"""


def _run(src: str | None, n: int) -> float:
    here = Path(__file__).resolve().parent
    code = CHILD.format(src=src, n=n)
    out = subprocess.run(
        ["taskset", "-c", "1", sys.executable, "-c", code],
        cwd=here,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("-n", type=int, default=50_000)
    args = parser.parse_args()
    trees: list[str | None] = [None, *args.src]
    runs: dict[str, list[float]] = {str(tree or "this checkout"): [] for tree in trees}
    for _ in range(args.pairs):
        for tree in trees:
            us = _run(tree, args.n)
            runs[str(tree or "this checkout")].append(us)
            print(json.dumps({"src": tree or "this checkout", "us_per_row": round(us, 3)}))
    print(json.dumps({name: round(statistics.median(v), 3) for name, v in runs.items()}))


if __name__ == "__main__":
    main()
