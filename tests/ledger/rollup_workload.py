"""A deterministic ledger workload for the rollup tests: many keys, hours, days, retries,
untasked requests, finishes; and the base-table sums the rollups must equal."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from ledger_helpers import record
from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger.records import COST_FIELDS, TOKEN_FIELDS, RequestRecord, TaskFinish
from gateway.ledger.rollup import DIMENSIONS, FAMILIES, MEASURES, is_untasked, key_of
from gateway.ledger.store import REQUESTS

START = datetime(2026, 3, 1, 22, 17, 3, 250_000, tzinfo=UTC)
TEAMS, PROJECTS = ("ops", "research", "web"), ("alpha", "beta")
MODELS = (("smart", "openai"), ("fast", "anthropic"), ("smart", "vllm"))
TIERS = ("standard", "priority", "flex")


def _money(rng: random.Random) -> Decimal:
    return Decimal(rng.randrange(0, 10**9)).scaleb(-10)


def _call(rng: random.Random, task_id: str, request_id: str, attempt: int, at: datetime,
          team: str, project: str) -> RequestRecord:  # fmt: skip
    model, backend = rng.choice(MODELS)
    costs = {name: _money(rng) for name in COST_FIELDS if name != "cost_total"}
    return record(
        task_id, request_id=request_id, attempt=attempt, created_at=at, team=team,
        project=project, model_alias=model, backend=backend, tier_served=rng.choice(TIERS),
        prompt_tokens=rng.randrange(10, 50_000), cached_tokens=rng.randrange(0, 10),
        cache_write_tokens=rng.randrange(0, 5), completion_tokens=rng.randrange(1, 4000),
        reasoning_tokens=rng.randrange(0, 900), cost_total=sum(costs.values(), Decimal(0)),
        step_kind=rng.choice(("plan", "code", None)), **costs,
        task_step=rng.choice(("user_turn", "tool_result", None, "", ":odd")),
        **_prefix(request_id, attempt),
    )  # fmt: skip


def _prefix(request_id: str, attempt: int) -> dict[str, Any]:
    """A prefix verdict (or none) and its numbers, from its own generator: `rng`'s draws
    stay as they were."""
    own = random.Random(f"{request_id}/{attempt}")
    status = own.choice(("hit", "miss:first_call", "miss:volatile_value", "miss:", None))
    if status is None:
        return {}
    lost = _money(own) if status.startswith("miss") and own.random() < 0.8 else None
    return {"prefix_status": status, "prefix_lost_usd": lost,
            "expected_cached_tokens": own.choice((None, own.randrange(0, 40_000)))}  # fmt: skip


def workload(seed: int = 14, tasks: int = 40, loose: int = 15) -> list[RequestRecord | TaskFinish]:
    """Tasks of several steps over ~3 days (some retried across an hour's edge), untasked
    requests with retries, and finishes; the same list for the same seed."""
    rng = random.Random(seed)
    entries: list[RequestRecord | TaskFinish] = []
    for n in range(tasks):
        team, project = rng.choice(TEAMS), rng.choice(PROJECTS)
        at = START + timedelta(minutes=rng.randrange(0, 3 * 24 * 60), microseconds=n)
        for step in range(rng.randrange(1, 6)):
            at += timedelta(minutes=rng.randrange(0, 50), seconds=rng.randrange(60))
            for attempt in range(rng.choice((1, 1, 2))):
                entries.append(_call(rng, f"run-{n}", f"req-r{n}s{step}", attempt,
                                     at + timedelta(seconds=attempt), team, project))  # fmt: skip
        if n % 3:
            outcome = "success" if n % 2 else "failed"
            entries.append(TaskFinish(f"run-{n}", outcome, at + timedelta(seconds=5)))
    for n in range(loose):
        hexid = f"{n:032x}"
        at = START + timedelta(minutes=rng.randrange(0, 3 * 24 * 60))
        for attempt in range(rng.choice((1, 2))):
            entries.append(_call(rng, f"task-{hexid}", f"req-{hexid}", attempt,
                                 at + timedelta(minutes=59 * attempt), rng.choice(TEAMS),
                                 rng.choice(PROJECTS)))  # fmt: skip
    return entries


async def base_rows(engine: AsyncEngine) -> list[RequestRecord]:
    """Every request row, as records."""
    async with engine.connect() as connection:
        rows = (await connection.execute(select(REQUESTS))).all()
    return [RequestRecord(**row._asdict()) for row in rows]


def expected_rollup(
    records: list[RequestRecord],
    floor: Callable[[datetime], datetime],
    dimensions: tuple[str, ...] = DIMENSIONS,
    extra: tuple[str, ...] = (),
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A rollup computed in Python from base rows: key -> sums."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for item in records:
        key = (floor(item.created_at), *(key_of(item, name) for name in dimensions))
        sums = out.setdefault(key, {name: 0 for name in (*MEASURES, *extra)})
        for name in extra:
            sums[name] += getattr(item, name) or 0
        sums["request_count"] += 1
        for name in (*TOKEN_FIELDS, *COST_FIELDS):
            sums[name] += getattr(item, name)
        if is_untasked(item):
            sums["untasked_requests"] += item.attempt == 0
            sums["untasked_cost"] += item.cost_total
    return out


async def stored_rollup(
    engine: AsyncEngine, table: Table, dimensions: tuple[str, ...], extra: tuple[str, ...] = ()
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """One rollup table as key -> sums."""
    async with engine.connect() as connection:
        rows = (await connection.execute(select(table))).all()
    return {
        (row.bucket, *(getattr(row, n) for n in dimensions)): {n: getattr(row, n) for n in (*MEASURES, *extra)}
        for row in rows
    }


async def assert_rollups_match_rows(engine: AsyncEngine) -> None:
    """Every rollup equals the base table's sums, key by key, to the digit."""
    records = await base_rows(engine)
    for family in FAMILIES:
        for table, floor in family.grains():
            stored = await stored_rollup(engine, table, family.dimensions, family.extra)
            expected = expected_rollup(records, floor, family.dimensions, family.extra)
            assert stored == expected, table.name
            assert stored or not records, table.name
