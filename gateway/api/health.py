"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import JSONResponse

from gateway.api.deps import ServicesDep

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Alive: the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """Ready only when the configuration loaded and at least one upstream is configured."""
    problems: list[str] = []
    # The configuration loaded: the app would not have started otherwise.
    if not services.config.models:
        problems.append("no upstream models configured")
    if services.config.uses_simulator and services.sim_base_url is None:
        problems.append("the bundled simulator is not running")
    body: dict[str, Any] = {"status": "ready" if not problems else "not_ready"}
    if problems:
        body["problems"] = problems
    body["models"] = len(services.config.models)
    return JSONResponse(body, status_code=200 if not problems else 503)
