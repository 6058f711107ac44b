"""Time the dashboards' SQL panels on a filled ledger (p50 of several runs, each panel).

Run after `python bench/ledger_fill.py --rows 10000000` (which fills farebox_bench):
`python -m tests.dashboards.sql_timing [--url postgresql://...] [--runs 5] [--hours 24]`.
Each query runs as Grafana would send it with every variable on All, over the last
`--hours` hours; the table says the 1 s target and whether each panel met it. Exits 1
when one did not. `--compare` also runs the slow way of the panels that read rollups and
indexes by rank (`panels.SLOW_WAY`) and prints whether they returned the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from tests.dashboards import panels

TARGET_S = 1.0
ALL = {"team": ".*", "model": ".*", "tier": ".*"}


async def _compare(
    connection: asyncpg.Connection,
    query: panels.Query,
    start: datetime,
    end: datetime,
    interval_s: int,
) -> None:
    """Print whether a panel returned what the slow way returns (panels.SLOW_WAY), and how
    long the slow way took."""
    fast = await connection.fetch(panels.sql(query.text, ALL, start, end, interval_s))
    began = time.perf_counter()
    slow = await connection.fetch(
        panels.sql(panels.SLOW_WAY[query.panel], ALL, start, end, interval_s)
    )
    took = time.perf_counter() - began
    same = sorted(map(tuple, fast)) == sorted(map(tuple, slow))
    verdict = "the same rows" if same else "DIFFERENT rows"
    print(f"{query.panel}: {verdict} as the slow way ({took:.3f} s)", file=sys.stderr)


async def _time(
    url: str, runs: int, hours: float, interval_s: int, compare: bool = False
) -> list[tuple[str, float, int]]:
    end = datetime.now(UTC)
    start = end - timedelta(hours=hours)
    connection = await asyncpg.connect(url)
    timings = []
    try:
        (rows,) = await connection.fetchrow("SELECT count(*) FROM requests")
        print(
            f"{rows:,} request rows; range {hours:g} h; interval {interval_s} s; {runs} runs each",
            file=sys.stderr,
        )
        for query in panels.queries():
            if query.kind != "postgres":
                continue
            text = panels.sql(query.text, ALL, start, end, interval_s)
            seconds, found = [], 0
            for _ in range(runs):
                began = time.perf_counter()
                found = len(await connection.fetch(text))
                seconds.append(time.perf_counter() - began)
            timings.append((query.panel, statistics.median(seconds), found))
            if compare and query.panel in panels.SLOW_WAY:
                await _compare(connection, query, start, end, interval_s)
    finally:
        await connection.close()
    return timings


def main(argv: list[str] | None = None) -> int:
    """Print a Markdown table of each SQL panel's p50; exit 1 if one misses the target."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/farebox_bench")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument(
        "--interval",
        type=int,
        default=3600,
        help="Grafana's $__interval in seconds (default: the series panels' 1 h minimum)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also check the panels of panels.SLOW_WAY against the slow way",
    )
    args = parser.parse_args(argv)
    timings = asyncio.run(_time(args.url, args.runs, args.hours, args.interval, args.compare))
    print(f"| SQL panel | rows | p50 (s) | under {TARGET_S:g} s |\n|---|---|---|---|")
    for panel, p50, found in timings:
        print(f"| {panel} | {found} | {p50:.3f} | {'yes' if p50 < TARGET_S else 'NO'} |")
    return 0 if all(p50 < TARGET_S for _, p50, _ in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
