"""The cost explorer's JSON: one read per panel of the page at `/ui` (docs/explorer.md).

Every route takes the same filters (`since`, `until`, `team`, `project`, `model`) and reads
only the rows the caller's key may see (`FilteredScopeDep`: a team key its own team, and a
403 for another team's filter), as `/v1/spend` does. Money is an exact decimal string.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.api.deps import LedgerDep, ServicesDep
from gateway.api.jsonable import jsonable
from gateway.api.params import Instant
from gateway.api.read_scope import FilteredScopeDep
from gateway.config import GatewayConfig
from gateway.errors import InvalidRequestError
from gateway.ledger.explorer_queries import (
    CacheUse,
    ExplorerFilter,
    cache_use,
    hourly_tokens,
    money_breakdown,
    outcome_stats,
    prefix_breaks,
    spend_series,
    top_tasks,
)
from gateway.pipeline.identifiers import MAX_NAME, check_identifier
from gateway.pricing import (
    EffectiveCost,
    GpuCost,
    GpuHourMeter,
    PriceBook,
    UnknownModelError,
    estimate,
)
from gateway.pricing.tiers import STANDARD

router = APIRouter(prefix="/v1/explorer")

MAX_GPU_HOURS = 168


async def explorer_filter(
    scope: FilteredScopeDep,  # a filter the key may not use is a 403 before any read
    since: Instant | None = None,
    until: Instant | None = None,
    model: Annotated[str | None, Query(description="Only this model alias's calls.")] = None,
) -> ExplorerFilter:
    """The rows a panel reads: the caller's scope, `since <= t < until`, one model."""
    if model is not None:
        check_identifier(model, "model", MAX_NAME)
    if since is not None and until is not None and until <= since:
        raise InvalidRequestError("until must be later than since", param="until")
    return ExplorerFilter(scope=scope, since=since, until=until, model=model)


FilterDep = Annotated[ExplorerFilter, Depends(explorer_filter)]


@router.get("/spend")
async def read_series(
    f: FilterDep,
    ledger: LedgerDep,
    by: Literal["team", "project", "model", "backend", "tier"] = "team",
    bucket: Literal["hour", "day"] = "hour",
) -> dict[str, Any]:
    """Requests and cost per time bucket and group, and each group's total, biggest first."""
    points = await spend_series(ledger, by, bucket, f)
    totals: dict[str | None, list[Any]] = {}
    for point in points:
        line = totals.setdefault(point.group, [0, Decimal(0)])
        line[0] += point.request_count
        line[1] += point.cost_total
    groups = [
        {"group": group, "request_count": count, "cost_total": cost}
        for group, (count, cost) in sorted(
            totals.items(), key=lambda item: (-item[1][1], item[0] is None, item[0] or "")
        )
    ]
    return {
        "object": "explorer.spend",
        "by": by,
        "bucket": bucket,
        "groups": jsonable(groups),
        "data": jsonable(points),
    }


@router.get("/breakdown")
async def read_breakdown(f: FilterDep, ledger: LedgerDep) -> dict[str, Any]:
    """Tokens and cost by kind (input, cached, cache writes, output, reasoning), with the
    output, reasoning and output-plus-reasoning shares of the cost."""
    return {"object": "explorer.breakdown", **jsonable(await money_breakdown(ledger, f))}


@router.get("/cache")
async def read_cache(
    f: FilterDep,
    ledger: LedgerDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    """Money saved by cache reads (at the price book's input price against its cache-read
    price), money lost to prefix breaks, and the costliest reasons prefixes broke."""
    uses = await cache_use(ledger, f)
    verdicts, breaks = await prefix_breaks(ledger, f)
    by_model, unpriced = [], []
    for use in uses:
        saved = _saved(services.prices, services.config, use)
        if saved is None:
            unpriced.append(use.model)
        by_model.append({**jsonable(use), "saved_usd": None if saved is None else jsonable(saved)})
    return {
        "object": "explorer.cache",
        "saved_usd": jsonable(sum((_saved_of(row) for row in by_model), Decimal(0))),
        "lost_usd": jsonable(sum((v.lost_usd for v in verdicts), Decimal(0))),
        "by_model": by_model,
        "unpriced": sorted(set(unpriced)),
        "verdicts": jsonable(verdicts),
        "breaks": jsonable(breaks[:limit]),
    }


def _saved(book: PriceBook, config: GatewayConfig, use: CacheUse) -> Decimal | None:
    """What `use`'s cache reads would have cost as plain input, less their cache price."""
    if not use.cached_tokens:
        return Decimal(0)
    key = config.price_key(use.model) if use.model in config.models else use.model
    tier = use.tier or STANDARD
    try:
        full = estimate(book, key, use.cached_tokens, tier=tier)
        cached = estimate(book, key, use.cached_tokens, cached=use.cached_tokens, tier=tier)
    except (UnknownModelError, ValueError):  # a model or tier the book no longer prices
        return None
    return full.total - cached.total


def _saved_of(row: dict[str, Any]) -> Decimal:
    value = row["saved_usd"]
    return Decimal(value) if value is not None else Decimal(0)


@router.get("/tasks")
async def read_tasks(
    f: FilterDep,
    ledger: LedgerDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    """Cost per ended task by team and outcome (ended in the window), and the costliest
    tasks that started in it; `/v1/tasks/{id}` has each one's calls."""
    return {
        "object": "explorer.tasks",
        "outcomes": jsonable(await outcome_stats(ledger, f)),
        "top": jsonable(await top_tasks(ledger, f, limit)),
    }


@router.get("/gpu")
async def read_gpu(f: FilterDep, ledger: LedgerDep, services: ServicesDep) -> dict[str, Any]:
    """Per GPU-priced model: planned price per million tokens against the effective one,
    hour by hour over the window (the last 24 hours unless given; at most 168)."""
    starts = _hours(f.since, f.until)
    data = []
    for alias, override in services.config.prices.items():
        if override.gpu is None or (f.model is not None and f.model != alias):
            continue
        data.append(await _gpu_model(ledger, f, alias, override.gpu, starts))
    return {"object": "explorer.gpu", "data": data}


def _hours(since: datetime | None, until: datetime | None) -> list[datetime]:
    """The UTC hours the window touches, oldest first."""
    end = _hour_start(until - timedelta(microseconds=1) if until else datetime.now(UTC))
    first = _hour_start(since) if since else end - timedelta(hours=23)
    count = int((end - first) / timedelta(hours=1)) + 1
    if count < 1:
        raise InvalidRequestError("since is later than now (or until)", param="since")
    if count > MAX_GPU_HOURS:
        raise InvalidRequestError(
            f"the GPU panel covers at most {MAX_GPU_HOURS} hours; narrow since/until",
            param="since",
        )
    return [first + timedelta(hours=h) for h in range(count)]


def _hour_start(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


async def _gpu_model(
    ledger: AsyncEngine, f: ExplorerFilter, alias: str, gpu: GpuCost, starts: list[datetime]
) -> dict[str, Any]:
    meter = GpuHourMeter(gpu, retain_hours=len(starts) + 1)
    only = ExplorerFilter(f.scope, starts[0], starts[-1] + timedelta(hours=1), alias)
    for start, (tokens_in, tokens_out) in (await hourly_tokens(ledger, only)).items():
        meter.record(start, tokens_in, tokens_out)
    span = meter.effective_span(starts[0], starts[-1])
    return {
        "model": alias,
        "gpu_cost_per_hour": jsonable(gpu.hourly_cost),
        "planned_input_per_million": jsonable(span.planned_input * 1_000_000),
        "planned_output_per_million": jsonable(span.planned_output * 1_000_000),
        "span": _effective(span),
        "hours": [_effective(meter.effective(start)) for start in starts],
    }


def _effective(cost: EffectiveCost) -> dict[str, Any]:
    return jsonable(
        {
            "start": cost.start,
            "hours": cost.hours,
            "gpu_cost": cost.gpu_cost,
            "input_tokens": cost.input_tokens,
            "output_tokens": cost.output_tokens,
            "planned_cost": cost.planned_cost,
            "utilisation": cost.utilisation,
            "effective_per_million": cost.per_million_tokens,
        }
    )
