"""GET /metrics: Prometheus exposition of the gateway's registry."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from gateway.api.deps import ServicesDep

router = APIRouter()


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    """Every `farebox_` metric, plus the ledger writer's backlog."""
    services.metrics.observe_ledger(services.ledger.stats())
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
