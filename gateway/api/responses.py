"""POST /v1/responses: OpenAI's Responses API, inbound (errors in OpenAI's shape).

Served by `answer` from the app's front (gateway/front.py); the FastAPI declaration below
stays for the OpenAPI document and serves through the same `respond`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.chat import error_response, read_body, request_headers
from gateway.api.deps import ServicesDep
from gateway.api.release import release_after
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError
from gateway.pipeline.offload import release
from gateway.pipeline.responses import handle_responses
from gateway.pipeline.responses_request import ResponsesContext
from gateway.request_id import request_id_of
from gateway.services import Services

PATH = "/v1/responses"
router = APIRouter()


async def answer(scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
    """Answer the Responses request `raw`, its `FareboxError`s in OpenAI's shape."""
    try:
        response = await respond(scope, raw, scope["state"]["services"])
    except FareboxError as exc:
        response = error_response(exc)
    await response(scope, receive, send)


async def respond(scope: Scope, raw: bytes, services: Services) -> Response:
    """The pipeline's response to `raw`; a FareboxError is the caller's to render."""
    ctx = ResponsesContext(
        raw_body=raw,
        headers=request_headers(scope),
        request_id=request_id_of(scope),
        principal=principal_of(scope),
    )
    response = await handle_responses(ctx, services)
    release_after(response, len(raw), _release, ctx)
    return response


@router.post(PATH)
async def create_response(request: Request, services: ServicesDep) -> Response:
    """Forward a Responses request, streamed or whole, through the pipeline."""
    raw = await read_body(request, services.settings.max_body_bytes)
    return await respond(request.scope, raw, services)  # a FareboxError is the app's to render


async def _release(ctx: ResponsesContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.native.get("input"))
