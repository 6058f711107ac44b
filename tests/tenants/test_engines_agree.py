"""The in-process and Redis engines agree, answer for answer, on random sequences of
reserves, settles, releases and reads, across expiries and a UTC midnight."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gateway.tenants import (
    Budget,
    Limiter,
    MemoryLimiter,
    RateLimit,
    Reservation,
    Scope,
    ScopeLimits,
)
from tests.redis_service import require_redis
from tests.tenants.conftest import HOLD_S, drop_keys, redis_limiter

pytestmark = pytest.mark.redis
START = datetime(2026, 11, 30, 23, 50, tzinfo=UTC)
# Rates in whole milliseconds per unit, so that both engines' GCRA times are exact.
POOL = [
    ScopeLimits(
        Scope("key", "k1"),
        (Budget("day", Decimal("4")),),
        RateLimit(requests_per_min=12, tokens_per_min=6000),
    ),
    ScopeLimits(
        Scope("team", "t1"),
        (Budget("day", Decimal("5"), soft_ratio=Decimal("0.5")), Budget("month", Decimal("9"))),
    ),
    ScopeLimits(Scope("project", "p1"), (Budget("total", Decimal("12")),)),
]
PERIODS = {"key": ("day",), "team": ("day", "month"), "project": ("total",)}


def cents(rng: random.Random, most: int) -> Decimal:
    return Decimal(rng.randint(0, most)) / 100


async def both(engines: list[Limiter], call: str, *args: object) -> list[object]:
    return [await getattr(engine, call)(*args) for engine in engines]


def same_answer(answers: list[object]) -> None:
    memory, redis = answers
    if isinstance(memory, Reservation) and isinstance(redis, Reservation):
        assert (memory.budgets, memory.rates) == (redis.budgets, redis.rates)
    else:
        assert memory == redis


@pytest.mark.parametrize("seed", range(4))
async def test_memory_and_redis_answer_alike(seed: int) -> None:
    rng = random.Random(seed)
    redis = redis_limiter(require_redis(), f"test-{uuid.uuid4().hex}")
    engines: list[Limiter] = [MemoryLimiter(hold_s=HOLD_S), redis]
    held: list[list[object]] = []
    done: list[list[object]] = []
    now = START
    try:
        for _ in range(300):
            step = rng.random()
            if step < 0.45:
                scopes = rng.sample(POOL, rng.randint(1, 3))
                answers = await both(
                    engines, "reserve", scopes, cents(rng, 60), rng.randint(0, 2500), now
                )
                same_answer(answers)
                if isinstance(answers[0], Reservation):
                    held.append(answers)
            elif step < 0.65 and (held or done):
                source = held if held and rng.random() < 0.8 else done or held
                pair = source.pop(rng.randrange(len(source)))
                actual, tokens = cents(rng, 70), rng.randint(0, 2500)
                settled = [
                    await engine.settle(reservation, actual, tokens, now)  # type: ignore[arg-type]
                    for engine, reservation in zip(engines, pair, strict=True)
                ]
                assert settled[0] == settled[1]
                done.append(pair)
            elif step < 0.75 and (held or done):
                source = held if held and rng.random() < 0.7 else done or held
                pair = source.pop(rng.randrange(len(source)))
                released = [
                    await engine.release(reservation, now)  # type: ignore[arg-type]
                    for engine, reservation in zip(engines, pair, strict=True)
                ]
                assert released[0] == released[1]
                done.append(pair)
            elif step < 0.9:
                now += timedelta(seconds=rng.randint(0, 40))
            else:
                limits = rng.choice(POOL)
                for period in PERIODS[limits.scope.kind]:
                    same_answer(await both(engines, "usage", limits.scope, period, now))
    finally:
        await drop_keys(redis)
        for engine in engines:
            await engine.aclose()
    assert now > START + timedelta(minutes=10)  # past midnight and many hold expiries
