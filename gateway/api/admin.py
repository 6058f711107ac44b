"""Admin: reload the configuration without a restart."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.deps import ServicesDep
from gateway.errors import InvalidRequestError

router = APIRouter()


@router.post("/admin/reload")
async def reload_config(request: Request, services: ServicesDep) -> dict[str, Any]:
    """Re-read the configuration file; a 400 says why it was refused (the old one stays)."""
    result = await request.state.reloader.reload_off_loop()
    if not result.ok:
        raise InvalidRequestError(result.message, code="invalid_config")
    return {"status": "reloaded", "message": result.message, "models": list(services.config.models)}
