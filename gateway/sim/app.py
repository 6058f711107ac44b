"""Build the simulator's ASGI application."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway import tokens
from gateway.sim.anthropic_api import anthropic_routes
from gateway.sim.completions_api import completions_routes
from gateway.sim.config import SimConfig, default_config
from gateway.sim.control import control_routes
from gateway.sim.embeddings_api import embeddings_routes
from gateway.sim.openai_api import openai_routes
from gateway.sim.responses_api import responses_routes
from gateway.sim.state import SimState


async def _http_error(request: Request, exc: Exception) -> Response:
    """Answer unknown paths and methods with FastAPI's JSON, as vLLM does."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def create_sim_app(config: SimConfig | None = None) -> Starlette:
    """Return a fresh simulator app; each app has its own caches, log and faults."""
    config = config or default_config()
    # Load the tokenizer now, not inside the first timed request.
    tokens.encoding()
    app = Starlette(
        routes=[
            *openai_routes(),
            *completions_routes(),
            *embeddings_routes(),
            *responses_routes(),
            *anthropic_routes(),
            *control_routes(),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    # The state is plain memory, so it is built here rather than in a lifespan:
    # httpx.ASGITransport does not run lifespans, and tests use it in-process.
    app.state.sim = SimState.build(config)
    return app
