"""GET /v1/models: the model aliases this gateway's configuration exposes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.api.deps import ServicesDep

router = APIRouter()
CREATED = 1_700_000_000  # a fixed epoch: aliases have no creation time of their own


@router.get("/v1/models")
async def list_models(services: ServicesDep) -> dict[str, Any]:
    """List configured aliases in OpenAI's shape."""
    data = [
        {"id": alias, "object": "model", "created": CREATED, "owned_by": route.provider}
        for alias, route in services.config.models.items()
    ]
    return {"object": "list", "data": data}
