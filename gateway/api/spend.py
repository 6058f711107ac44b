"""Spend: grouped totals over a time range (JSON or CSV), cost per finished task, estimates.

`/v1/spend/tasks` keeps outcomes apart: statistics over finished tasks (closed by the
client) unless `include_abandoned` or `status` says otherwise, and an `outcomes` list with
finished tasks, abandoned tasks and untasked requests (no task id) on their own lines.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from gateway.api.deps import LedgerDep, ServicesDep
from gateway.api.jsonable import jsonable
from gateway.api.params import Instant
from gateway.api.read_scope import FilteredScopeDep
from gateway.errors import InvalidRequestError
from gateway.ledger import SpendRow, TaskCostStats, export_csv, spend, task_cost_stats
from gateway.ledger.queries import TaskOutcomes, task_outcomes
from gateway.ledger.records import ABANDONED, OPEN
from gateway.pipeline.identifiers import MAX_OUTCOME, check_identifier
from gateway.pricing import CostEstimateRequest, UnknownModelError, estimate_request

router = APIRouter()

GroupBy = Literal["team", "project", "model", "backend", "tier", "step", "step_kind"]


@router.get("/v1/spend", response_model=None)
async def read_spend(
    scope: FilteredScopeDep,  # a filter the key may not use is a 403 before any read
    ledger: LedgerDep,
    group_by: GroupBy = "team",
    since: Instant | None = None,
    until: Instant | None = None,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> dict[str, Any] | Response:
    """Requests, tokens and cost by component, grouped, over `since <= t < until`, of the
    rows the caller may read (its team's, unless it sees all) and `team`/`project` name."""
    rows = await spend(ledger, group_by, since, until, scope=scope)
    if format == "csv":
        return Response(export_csv(rows, SpendRow), media_type="text/csv")
    return {"object": "list", "group_by": group_by, "data": jsonable(rows)}


@router.get("/v1/spend/tasks", response_model=None)
async def read_task_costs(
    scope: FilteredScopeDep,  # a filter the key may not use is a 403 before any read
    ledger: LedgerDep,
    group_by: Literal["team", "project"] = "team",
    since: Instant | None = None,
    until: Instant | None = None,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
    include_abandoned: bool = False,
    status: Annotated[list[str] | None, Query()] = None,
    table: Literal["costs", "outcomes"] = "costs",
) -> dict[str, Any] | Response:
    """Cost per finished task (count, p50, p95, max), the output/reasoning/cache-write shares,
    and per group the finished and abandoned tasks and untasked requests, each on its own."""
    statuses = _statuses(status)
    rows = await task_cost_stats(
        ledger,
        group_by,
        since,
        until,
        statuses=statuses,
        include_abandoned=include_abandoned,
        scope=scope,
    )
    outcomes = await task_outcomes(ledger, group_by, since, until, scope=scope)
    if format == "csv" and table == "outcomes":
        return Response(export_csv(outcomes, TaskOutcomes), media_type="text/csv")
    if format == "csv":
        return Response(export_csv(rows, TaskCostStats), media_type="text/csv")
    return {
        "object": "list",
        "group_by": group_by,
        "tasks": selection(statuses, include_abandoned),
        "data": jsonable(rows),
        "outcomes": jsonable(outcomes),
    }


def selection(statuses: list[str] | None, include_abandoned: bool) -> list[str]:
    """The task statuses the statistics cover, as the response states them."""
    if statuses:
        return statuses
    return ["finished", ABANDONED] if include_abandoned else ["finished"]


def _statuses(values: list[str] | None) -> list[str] | None:
    """The `status` filter, each a valid outcome word; `open` tasks have no final cost."""
    if not values:
        return None
    for value in values:
        check_identifier(value, "status", MAX_OUTCOME)
        if value == OPEN:
            raise InvalidRequestError(
                "status=open: an open task has no final cost; choose a finished outcome "
                "(success, failed, ...) or abandoned",
                param="status",
            )
    return values


@router.post("/v1/cost/estimate")
async def estimate_cost(body: CostEstimateRequest, services: ServicesDep) -> dict[str, Any]:
    """Price hypothetical token counts for a model (an alias or a price-map name) and tier.

    Not scoped: it reads the price book, never the ledger, so it shows no one's spend."""
    key = (
        services.config.price_key(body.model)
        if body.model in services.config.models
        else body.model
    )
    try:
        breakdown = estimate_request(services.prices, body.model_copy(update={"model": key}))
    except UnknownModelError as exc:
        raise InvalidRequestError(str(exc), param="model") from exc
    return {"object": "cost.estimate", **breakdown.as_dict()}
