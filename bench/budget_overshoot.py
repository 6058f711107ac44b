"""Budget overshoot under concurrency, and what a reserve + settle costs.

Two engines on one real Redis (two clients: two gateway replicas) and 64 concurrent
clients spend one daily budget: each reserves a random worst case ($0.0001-$0.50) and
settles a random actual cost no higher than it (a refusal while others hold money is
retried, so every run ends with the budget spent to within one worst case). Overshoot
is what was settled past the limit; the issue's bound is the largest single worst case.
Then, one client alone, the p50/p99 of a reserve + settle for a request with key, team
and project budgets (day and month each) and rate limits, in process and on Redis.

    .venv/bin/python bench/budget_overshoot.py [--runs 20] [--clients 64] [--json] [--no-write]

writes bench/results/budget_overshoot.md unless told not to.

Exits 1 when a run overshoots past the bound (or Redis is unreachable: exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from gateway.settings import RedisLimits
from gateway.tenants import (
    Budget,
    BudgetExceeded,
    Limiter,
    MemoryLimiter,
    RateLimit,
    Reservation,
    Scope,
    ScopeLimits,
)
from gateway.tenants.redis import RedisLimiter

RESULTS = Path(__file__).resolve().parent / "results" / "budget_overshoot.md"
CENT = Decimal("0.0000000001")
# A loaded box must not look like an outage: this measures the engine, not timeouts.
PATIENT = RedisLimits(timeout_s=10, connect_timeout_s=10, pool_wait_s=30, pool_size=64)


@dataclass(frozen=True)
class Run:
    """One run: what the clients settled against the limit, and the bound it must keep."""

    limit_usd: str
    settled_usd: str  # the clients' own sum of what they settled
    engine_spent_usd: str  # what the engine counted
    overshoot_usd: str
    max_worst_case_usd: str
    reserved: int
    refused: int

    @property
    def within_bound(self) -> bool:
        return Decimal(self.overshoot_usd) <= Decimal(self.max_worst_case_usd)


async def spend_one_budget(
    engines: Sequence[Limiter], limit_usd: Decimal, clients: int, attempts: int, seed: int
) -> Run:
    """`clients` tasks, spread over `engines`, spend one budget `attempts` times each."""
    rng = random.Random(seed)
    team = ScopeLimits(Scope("team", f"bench-{uuid.uuid4().hex}"), (Budget("day", limit_usd),))
    now = datetime.now(UTC)
    settled: list[Decimal] = []
    worst_cases: list[Decimal] = []
    refused = 0

    async def client(engine: Limiter) -> None:
        nonlocal refused
        for _ in range(attempts):
            worst = Decimal(rng.randint(1, 5000)) / 10000
            worst_cases.append(worst)
            held = await engine.reserve([team], worst, 0, now)
            # Refused while others hold money: try again, as a client after a 429 would,
            # so that the run ends with the budget spent, not merely held.
            while isinstance(held, BudgetExceeded) and held.held_usd > 0:
                refused += 1
                await asyncio.sleep(0)
                held = await engine.reserve([team], worst, 0, now)
            if not isinstance(held, Reservation):
                refused += 1
                continue
            await asyncio.sleep(0)  # the upstream call: other clients reserve meanwhile
            actual = (worst * rng.randint(0, 100) / 100).quantize(CENT)
            await engine.settle(held, actual, 0, now)
            settled.append(actual)

    await asyncio.gather(*(client(engines[i % len(engines)]) for i in range(clients)))
    total = sum(settled, Decimal(0))
    usage = await engines[0].usage(team.scope, "day", now)
    return Run(
        str(limit_usd),
        str(total),
        str(usage.spent_usd),
        str(max(total - limit_usd, Decimal(0))),
        str(max(worst_cases)),
        len(settled),
        refused,
    )


def typical_request(tag: str) -> list[ScopeLimits]:
    """A key, its team and project: day and month budgets each, rate limits on the key."""
    budgets = (Budget("day", Decimal(10**6)), Budget("month", Decimal(10**7)))
    rate = RateLimit(requests_per_min=10**9, tokens_per_min=10**12, usd_per_min=Decimal(10**6))
    return [
        ScopeLimits(Scope("key", f"{tag}-key"), budgets, rate),
        ScopeLimits(Scope("team", f"{tag}-team"), budgets),
        ScopeLimits(Scope("project", f"{tag}-project"), budgets),
    ]


def one_key(tag: str) -> list[ScopeLimits]:
    """The least a virtual key brings: its own daily budget."""
    return [ScopeLimits(Scope("key", f"{tag}-key"), (Budget("day", Decimal(10**6)),))]


async def reserve_settle_us(
    engine: Limiter, samples: int, scopes: list[ScopeLimits]
) -> dict[str, float]:
    """p50 and p99 of one reserve + settle, in microseconds, one client alone."""
    timings = []
    for _ in range(samples):
        started = time.perf_counter()
        held = await engine.reserve(scopes, Decimal("0.01"), 1000)
        if not isinstance(held, Reservation):
            raise RuntimeError(f"the latency run was refused: {held.message}")
        await engine.settle(held, Decimal("0.004"), 400)
        timings.append((time.perf_counter() - started) * 1e6)
    quantiles = statistics.quantiles(timings, n=100)
    return {"p50_us": round(quantiles[49], 1), "p99_us": round(quantiles[98], 1)}


async def main(args: argparse.Namespace) -> int:
    namespace = f"bench-{uuid.uuid4().hex}"
    replicas = [RedisLimiter.from_url(args.redis_url, namespace, PATIENT) for _ in range(2)]
    try:
        await replicas[0].client.ping()
    except OSError as exc:
        print(f"Redis at {args.redis_url} is unreachable: {exc}", file=sys.stderr)
        return 2
    try:
        runs = [
            await spend_one_budget(replicas, Decimal(args.limit), args.clients, args.attempts, seed)
            for seed in range(args.runs)
        ]
        latency = {
            f"{where}, {shape.__name__}": await reserve_settle_us(
                engine, args.samples, shape(uuid.uuid4().hex)
            )
            for where, engine in (("memory", MemoryLimiter()), ("redis", replicas[0]))
            for shape in (one_key, typical_request)
        }
    finally:
        async for key in replicas[0].client.scan_iter(match=f"{{{namespace}:tenants}}:*"):
            await replicas[0].client.delete(key)
        for replica in replicas:
            await replica.aclose()
    report(runs, latency, args.json)
    if not args.no_write:
        RESULTS.write_text(results_page(runs, latency, args))
    return 0 if all(run.within_bound for run in runs) else 1


def report(runs: list[Run], latency: dict[str, dict[str, float]], as_json: bool) -> None:
    worst = max(runs, key=lambda run: Decimal(run.overshoot_usd))
    if as_json:
        body = {"runs": [asdict(run) for run in runs], "reserve_settle": latency}
        print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        return
    print(f"{len(runs)} runs, 2 replicas on Redis, limit ${runs[0].limit_usd} a day")
    for run in runs:
        print(
            f"  settled ${run.settled_usd} (engine ${run.engine_spent_usd}), overshoot "
            f"${run.overshoot_usd} (bound ${run.max_worst_case_usd}), "
            f"{run.reserved} held, {run.refused} refused"
        )
    print(f"largest overshoot ${worst.overshoot_usd}")
    for name, cost in latency.items():
        print(f"reserve + settle, {name}: p50 {cost['p50_us']} µs, p99 {cost['p99_us']} µs")


def results_page(
    runs: list[Run], latency: dict[str, dict[str, float]], args: argparse.Namespace
) -> str:
    """The results file: the command, the machine, the overshoot and the latency tables."""
    lines = [
        "# Budget overshoot and reserve + settle cost",
        "",
        f"Command: `python bench/budget_overshoot.py --runs {args.runs} --clients "
        f"{args.clients} --attempts {args.attempts} --samples {args.samples}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at the end, Python {platform.python_version()},"
        " Redis on 127.0.0.1",
        "",
        f"2 replicas (two Redis clients), {args.clients} concurrent clients, one daily budget "
        f"of ${args.limit}; settles at most their reservation.",
        "",
        "| run | settled USD | engine's spent USD | overshoot USD | bound USD | held | refused |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {n} | {r.settled_usd} | {r.engine_spent_usd} | {r.overshoot_usd} "
        f"| {r.max_worst_case_usd} | {r.reserved} | {r.refused} |"
        for n, r in enumerate(runs, 1)
    ]
    lines += ["", "| reserve + settle | p50 µs | p99 µs |", "|---|---:|---:|"]
    lines += [f"| {name} | {c['p50_us']} | {c['p99_us']} |" for name, c in latency.items()]
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--attempts", type=int, default=20, help="requests per client")
    parser.add_argument("--limit", default="10", help="the daily budget in USD")
    parser.add_argument("--samples", type=int, default=2000, help="latency samples")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
