"""Redis's own CPU per budget reservation and settle, against a real Redis.

Run: `python bench/budget_redis.py [--redis-url redis://127.0.0.1:6379/12] [-n 3000]
[--scopes 3] [--rounds 3]`.

Each request of a gateway with budgets reserves its worst case in every scope's window
(a key's, its team's, its project's: one script) and settles what it spent (another).
This runs `-n` reservations and their settles through `RedisLimiter`, 16 at a time as
concurrent requests would, and prints Redis's CPU per pair (`INFO cpu`, so other clients
of the same Redis count too: run it on a quiet one), one figure per round, sorted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import redis

from gateway.settings import RedisLimits
from gateway.tenants import Budget, Reservation, Scope, ScopeLimits
from gateway.tenants.redis import RedisLimiter

KINDS = ("key", "team", "project", "org")


def _cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _round(engine: RedisLimiter, scopes: list[ScopeLimits], n: int) -> int:
    now, done = datetime.now(UTC), 0
    for _ in range(n // 16):
        held = await asyncio.gather(
            *(engine.reserve(scopes, Decimal("0.01"), 0, now) for _ in range(16))
        )
        assert all(isinstance(one, Reservation) for one in held)
        await asyncio.gather(*(engine.settle(one, Decimal("0.001"), 0, now) for one in held))  # type: ignore[arg-type]
        done += 16
    return done


async def main(args: argparse.Namespace) -> None:
    limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10)
    engine = RedisLimiter.from_url(args.redis_url, f"bench-{uuid.uuid4().hex}", limits)
    admin = redis.Redis.from_url(args.redis_url)
    kinds = KINDS[: args.scopes]
    scopes = [ScopeLimits(Scope(kind, "bench"), (Budget("day", Decimal(10**6)),)) for kind in kinds]
    per_pair = []
    try:
        await _round(engine, scopes, 160)  # scripts loaded, connections made
        for _ in range(args.rounds):
            before = _cpu_s(admin)
            done = await _round(engine, scopes, args.n)
            per_pair.append(round((_cpu_s(admin) - before) / done * 1e6, 2))
    finally:
        async for key in engine.client.scan_iter(match=f"{engine.prefix}*"):
            await engine.client.delete(key)
        await engine.aclose()
    print(json.dumps({"scopes": args.scopes, "redis_us_per_reserve_and_settle": sorted(per_pair)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--scopes", type=int, default=3, choices=range(1, len(KINDS) + 1))
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
