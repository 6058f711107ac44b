"""CPU per period of `gateway.loopwatch.LoopWatch`: what the loop-lag meter costs the loop.

Run: `python bench/c1_loopwatch.py [--src DIR] [-n 20000]` (pin it: `taskset -c 1`).

Runs a LoopWatch with a zero period on uvloop (so its periods follow each other, with
the loop otherwise idle but for a 1 ms sleeper) until it has observed `-n` periods, and
prints the loop thread's CPU per period in µs. `--src` imports the gateway from another
checkout (an A/B of two trees); alternate the two, the box is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time


async def _per_period(n: int) -> float:
    from gateway.loopwatch import LoopWatch

    lags: list[float] = []
    async with LoopWatch(lags.append, period=0.0):
        started = time.thread_time()
        while len(lags) < n:
            await asyncio.sleep(0.001)
        spent = time.thread_time() - started
    return spent / len(lags) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("-n", type=int, default=20_000)
    args = parser.parse_args()
    if args.src:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, args.src)
    import uvloop

    us = uvloop.run(_per_period(args.n))
    print(json.dumps({"src": args.src, "us_per_period": round(us, 2)}))


if __name__ == "__main__":
    main()
