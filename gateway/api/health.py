"""Liveness and readiness."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.responses import JSONResponse

from gateway.api.deps import ServicesDep
from gateway.config import GatewayConfig
from gateway.state import StateHealth

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Alive: the process answers."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """Ready when the configuration loaded and an upstream is configured; 503 otherwise.

    `warming` (503) while litellm loads in the background for a route that needs it.
    Redis unreachable is `degraded`, still 200: the replica serves every request (with
    per-process state), so it stays in the load balancer; the body says why.
    """
    problems: list[str] = []
    # The configuration loaded: the app would not have started otherwise.
    if not services.config.models:
        problems.append("no upstream models configured")
    if services.config.uses_simulator and services.sim_base_url is None:
        problems.append("the bundled simulator is not running")
    if services.upstreams.warm_failure is not None:
        problems.append(services.upstreams.warm_failure)
    state = services.state.health()
    warming = services.upstreams.warming
    budgets = services.limiter.health()
    degraded = state.degraded or budgets.degraded
    body: dict[str, Any] = {"status": _status(problems, warming, degraded)}
    if problems:
        body["problems"] = problems
    if warming:
        body["warming"] = "litellm is loading for the routes that need it"
    body["models"] = len(services.config.models)
    body["auth"] = "open" if services.settings.admin_key is None else "keys"
    body["state"] = _state(state)
    body["budgets"] = _budgets(budgets, _fail_closed(services.config))
    return JSONResponse(body, status_code=503 if problems or warming else 200)


def _status(problems: list[str], warming: bool, degraded: bool) -> str:
    if problems:
        return "not_ready"
    if warming:
        return "warming"
    return "degraded" if degraded else "ready"


def _state(health: StateHealth) -> dict[str, Any]:
    """Where shared state lives: `ok`, or `degraded` (per-process) with the reason."""
    body: dict[str, Any] = {
        "backend": health.backend,
        "status": "degraded" if health.degraded else "ok",
    }
    if health.degraded:
        body["reason"] = health.reason
        since = health.since
        body["since"] = datetime.fromtimestamp(since, UTC).isoformat() if since else None
    return body


def _fail_closed(config: GatewayConfig) -> list[str]:
    """The configured teams and projects whose budget refuses while its state is away."""
    found = []
    for kind, quotas in (("team", config.tenants.teams), ("project", config.tenants.projects)):
        for name, quota in quotas.items():
            if quota.budget is not None and quota.budget.on_state_outage == "fail_closed":
                found.append(f"{kind} '{name}'")
    return found


def _budgets(health: StateHealth, fail_closed: list[str]) -> dict[str, Any]:
    """Where budget and rate-limit counters live, as of the limiter's last call to Redis."""
    body = _state(health)
    if health.degraded:
        body["fail_closed"] = (
            "budgets set to fail_closed are refused with 503 budget_state_unavailable "
            "until Redis answers; fail_open ones are counted by this replica alone"
        )
        if fail_closed:
            body["refusing"] = fail_closed
    return body
