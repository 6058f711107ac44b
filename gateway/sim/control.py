"""Test-control routes under /sim/: request log, fault injection, runtime config, reset."""

from __future__ import annotations

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.sim.config import updated_config
from gateway.sim.faults import FaultSpec
from gateway.sim.state import SimState


def _state(request: Request) -> SimState:
    state: SimState = request.app.state.sim
    return state


async def list_requests(request: Request) -> Response:
    """Return every logged request, oldest first."""
    return JSONResponse([record.to_json() for record in _state(request).log.records()])


async def clear_requests(request: Request) -> Response:
    """Forget the logged requests."""
    _state(request).log.clear()
    return Response(status_code=204)


async def add_fault(request: Request) -> Response:
    """Arm a fault from a FaultSpec JSON body."""
    try:
        fault = FaultSpec.model_validate(orjson.loads(await request.body()))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        return JSONResponse({"error": f"invalid fault: {exc}"}, status_code=400)
    _state(request).faults.add(fault)
    return JSONResponse(fault.model_dump(), status_code=201)


async def list_faults(request: Request) -> Response:
    """Return the faults still armed, with their remaining counts."""
    return JSONResponse([fault.model_dump() for fault in _state(request).faults.list()])


async def clear_faults(request: Request) -> Response:
    """Disarm every fault."""
    _state(request).faults.clear()
    return Response(status_code=204)


async def show_config(request: Request) -> Response:
    """Return the configuration in force, secrets masked."""
    return JSONResponse(_state(request).config.model_dump(mode="json"))


async def change_config(request: Request) -> Response:
    """Replace top-level config fields (timing, seed, models...) until the next reset."""
    state = _state(request)
    try:
        changes = orjson.loads(await request.body())
        if not isinstance(changes, dict):
            raise ValueError("the body must be a JSON object of SimConfig fields")
        state.config = updated_config(state.config, changes)
    except (orjson.JSONDecodeError, ValueError) as exc:
        # pydantic's ValidationError is a ValueError too.
        return JSONResponse({"error": f"invalid config change: {exc}"}, status_code=400)
    return JSONResponse(state.config.model_dump(mode="json"))


async def reset(request: Request) -> Response:
    """Clear requests, faults, both prompt caches and config changes."""
    _state(request).reset()
    return Response(status_code=204)


def control_routes() -> list[Route]:
    """Return the /sim/ routes."""
    return [
        Route("/sim/requests", list_requests, methods=["GET"]),
        Route("/sim/requests", clear_requests, methods=["DELETE"]),
        Route("/sim/faults", list_faults, methods=["GET"]),
        Route("/sim/faults", add_fault, methods=["POST"]),
        Route("/sim/faults", clear_faults, methods=["DELETE"]),
        Route("/sim/config", show_config, methods=["GET"]),
        Route("/sim/config", change_config, methods=["POST"]),
        Route("/sim/reset", reset, methods=["POST"]),
    ]
