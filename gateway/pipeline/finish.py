"""Stages 6-8 once a reply is over: settle what was measured, price it, record it."""

from __future__ import annotations

import time

from gateway.errors import FareboxError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import Meter
from gateway.pipeline.price import price_usage, settle_tier, usage_of
from gateway.pipeline.record import BookedCost, ledger_record, observe_metrics
from gateway.services import Services


def settle(ctx: RequestContext, meter: Meter, error: FareboxError | None, cancelled: bool) -> None:
    """Copy what the meter saw into the context: timings and outcome."""
    timings = ctx.timings
    timings.first_token = meter.first_token
    timings.first_answer_token = meter.first_answer_token
    timings.last_token = meter.last_token
    timings.finished = time.perf_counter()
    settle_tier(ctx, meter)
    if error is not None:
        ctx.status_code, ctx.error_type = error.status_code, error.error_type
    elif cancelled:
        ctx.status_code, ctx.error_type = 499, "client_disconnected"
    else:
        ctx.status_code = 200


def price_now(ctx: RequestContext, meter: Meter, services: Services) -> None:
    """Price the usage the upstream reported, as soon as it arrives (the stream's last chunk)."""
    assert ctx.alias is not None and meter.usage is not None
    settle_tier(ctx, meter)
    price_usage(ctx, meter.usage, services.prices, services.config.price_key(ctx.alias))


async def finish(
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    *,
    error: FareboxError | None = None,
    cancelled: bool = False,
) -> None:
    """Settle, price and record the request, then hand it to the observers."""
    settle(ctx, meter, error, cancelled)
    assert ctx.alias is not None and ctx.task is not None
    usage = await usage_of(ctx, meter, cancelled)
    if ctx.cost is None or ctx.usage is not usage:
        price_usage(ctx, usage, services.prices, services.config.price_key(ctx.alias))
    booked = BookedCost.of(ctx.cost)
    services.ledger.submit(ledger_record(ctx, booked))
    observe_metrics(services.metrics, ctx, booked)
    ttl = services.config.tasks.idle_timeout_s * 2
    ctx.task_cost = await services.state.add_task_cost(ctx.task.task_id, booked.total, ttl)
    if ctx.task.done:
        outcome = "success" if ctx.status_code == 200 else "failed"
        services.ledger.finish_task(ctx.task.task_id, outcome)
    services.notify(ctx)
