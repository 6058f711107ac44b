"""POST /v1/responses: OpenAI's Responses API, inbound (errors in OpenAI's shape)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.api.chat import read_body
from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.pipeline.offload import release
from gateway.pipeline.responses import handle_responses
from gateway.pipeline.responses_request import ResponsesContext
from gateway.request_id import request_id_of

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request, services: ServicesDep) -> Response:
    """Forward a Responses request, streamed or whole, through the pipeline."""
    raw = await read_body(request, services.settings.max_body_bytes)
    ctx = ResponsesContext(
        raw_body=raw,
        headers=dict(request.headers),
        request_id=request_id_of(request.scope),
        principal=principal_of(request.scope),
    )
    response = await handle_responses(ctx, services)  # a FareboxError is the app's to render
    response.background = BackgroundTask(_release, ctx)
    return response


async def _release(ctx: ResponsesContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.native.get("input"))
