"""GET /v1/gpu: self-hosted models priced by GPU time, planned against effective.

The planned price per token comes from the configured throughput; the effective price
is the hour's GPU cost divided by the tokens the ledger shows it served, so an idle GPU
shows up as expensive tokens.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.api.deps import LedgerDep, ServicesDep
from gateway.api.jsonable import jsonable
from gateway.api.read_scope import ScopeDep
from gateway.ledger import spend
from gateway.ledger.scope import ReadScope
from gateway.pricing import GpuCost, GpuHourMeter

router = APIRouter()


def _hour_start(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


async def _meter(
    ledger: AsyncEngine, alias: str, gpu: GpuCost, hours: list[datetime], scope: ReadScope
) -> GpuHourMeter:
    """A meter fed with the tokens the ledger recorded for `alias` within `scope`, hourly."""
    meter = GpuHourMeter(gpu, retain_hours=len(hours) + 1)
    for start in hours:
        rows = await spend(ledger, "model", start, start + timedelta(hours=1), scope=scope)
        for row in rows:
            if row.group == alias:
                meter.record(start, row.prompt_tokens - row.cached_tokens, row.completion_tokens)
    return meter


@router.get("/v1/gpu")
async def gpu_costs(
    services: ServicesDep,
    ledger: LedgerDep,
    scope: ScopeDep,
    hours: Annotated[int, Query(ge=1, le=168)] = 24,
) -> dict[str, Any]:
    """Per GPU-priced model: planned USD per million tokens, and the effective price per hour.

    A team key's hours count its own team's tokens only: its effective price is what the
    GPU would cost per token had the team been its only user, and other teams' volume (which
    the fleet-wide price and utilisation would reveal) stays hidden."""
    now = _hour_start(datetime.now(UTC))
    starts = [now - timedelta(hours=h) for h in range(hours - 1, -1, -1)]
    data = []
    for alias, override in services.config.prices.items():
        if override.gpu is None:
            continue
        meter = await _meter(ledger, alias, override.gpu, starts, scope)
        hourly = [meter.effective(start) for start in starts]
        data.append(
            {
                "model": alias,
                "gpu_cost_per_hour": override.gpu.hourly_cost,
                "hours": [_hour(cost) for cost in hourly],
                "span": _hour(meter.effective_span(starts[0], starts[-1])),  # inclusive
            }
        )
    return {"object": "list", "data": jsonable(data)}


def _hour(cost: Any) -> dict[str, Any]:
    return {
        "start": cost.start,
        "hours": cost.hours,
        "gpu_cost": cost.gpu_cost,
        "input_tokens": cost.input_tokens,
        "output_tokens": cost.output_tokens,
        "utilisation": cost.utilisation,
        "planned_input_per_million": cost.planned_input * 1_000_000,
        "planned_output_per_million": cost.planned_output * 1_000_000,
        "effective_per_million": cost.per_million_tokens,
        "effective_input_per_million": cost.input_per_million,
        "effective_output_per_million": cost.output_per_million,
    }
