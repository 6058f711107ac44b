"""Stages 6-8 once a reply is over: settle what was measured, then price and record it."""

from __future__ import annotations

import time

from gateway.errors import FareboxError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import Meter
from gateway.services import Services


def settle(ctx: RequestContext, meter: Meter, error: FareboxError | None, cancelled: bool) -> None:
    """Copy what the meter saw into the context: usage, tier, timings, outcome."""
    timings = ctx.timings
    timings.first_token = meter.first_token
    timings.first_answer_token = meter.first_answer_token
    timings.last_token = meter.last_token
    timings.finished = time.perf_counter()
    ctx.usage = meter.usage
    ctx.tier_served = meter.service_tier or ctx.tier_requested
    if error is not None:
        ctx.status_code, ctx.error_type = error.status_code, error.error_type
    elif cancelled:
        ctx.status_code, ctx.error_type = 499, "client_disconnected"
    else:
        ctx.status_code = 200


def finish(
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    *,
    error: FareboxError | None = None,
    cancelled: bool = False,
) -> None:
    """Settle the request and hand it to the observers (metrics, ledger)."""
    settle(ctx, meter, error, cancelled)
    services.notify(ctx)
