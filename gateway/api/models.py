"""GET /v1/models: the model aliases this gateway's configuration exposes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.pipeline.entitle import may_use

router = APIRouter()
CREATED = 1_700_000_000  # a fixed epoch: aliases have no creation time of their own


@router.get("/v1/models")
async def list_models(request: Request, services: ServicesDep) -> dict[str, Any]:
    """List configured aliases in OpenAI's shape: those the caller's key may use."""
    principal = principal_of(request.scope)
    data = [
        {"id": alias, "object": "model", "created": CREATED, "owned_by": route.provider}
        for alias, route in services.config.models.items()
        if may_use(principal, alias)
    ]
    return {"object": "list", "data": data}
