"""GET /metrics: Prometheus exposition of the gateway's registry."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from gateway import busy_poll
from gateway.api.deps import ServicesDep
from gateway.services import Services

router = APIRouter()


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    """Every `farebox_` metric, plus the ledger writer's backlog."""
    observe_at_scrape(services)
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def observe_at_scrape(services: Services) -> None:
    """Read what only a scrape samples: the ledger's backlog, breakers, GPU prices, and
    the busy-poller's counts (this loop's: a scrape runs on the loop it polls)."""
    services.metrics.observe_ledger(services.ledger.stats())
    poll = busy_poll.current()
    if poll is not None:
        services.metrics.observe_busy_poll(poll.spins, poll.idle_s, poll.backoffs)
    services.metrics.observe_breakers(services.breakers.states())
    gpu = {alias: p.gpu.hourly_cost for alias, p in services.config.prices.items() if p.gpu}
    services.metrics.observe_gpu_prices(gpu)
