"""Admin: reload the configuration without a restart (the admin key only: gateway.auth)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.deps import ServicesDep
from gateway.auth.principal import Principal, principal_of
from gateway.errors import InvalidRequestError

router = APIRouter()


@router.post("/admin/reload")
async def reload_config(request: Request, services: ServicesDep) -> dict[str, Any]:
    """Re-read the configuration file; a 400 says why it was refused (the old one stays).

    `unchanged` when the file's SHA-256 is the one in force (it is not parsed again).
    """
    actor = _actor(principal_of(request.scope))
    result = await request.state.reloader.reload_off_loop(actor)
    if not result.ok:
        raise InvalidRequestError(result.message, code="invalid_config")
    return {
        "status": result.result,
        "message": result.message,
        "models": list(services.config.models),
        "content_hash": result.content_hash,
        "changes": result.diff,
    }


def _actor(principal: Principal) -> str:
    """The audit log's actor: admin, open, or key:<id>."""
    return f"key:{principal.key.id}" if principal.key is not None else principal.kind
