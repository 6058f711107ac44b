"""POST /v1/completions: OpenAI's legacy text completions, inbound (OpenAI's error shape)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.api.chat import read_body
from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.pipeline.completions import handle_completions
from gateway.pipeline.completions_request import CompletionsContext, Kind
from gateway.pipeline.offload import release
from gateway.request_id import request_id_of
from gateway.services import Services

router = APIRouter()


async def answer(request: Request, services: Services, kind: Kind) -> Response:
    """Run the completions pipeline for `kind`; a FareboxError is the app's to render."""
    raw = await read_body(request, services.settings.max_body_bytes)
    ctx = CompletionsContext(
        raw_body=raw,
        headers=dict(request.headers),
        request_id=request_id_of(request.scope),
        principal=principal_of(request.scope),
        kind=kind,
    )
    response = await handle_completions(ctx, services)
    response.background = BackgroundTask(_release, ctx)
    return response


@router.post("/v1/completions")
async def create_completion(request: Request, services: ServicesDep) -> Response:
    """Forward a text completion, streamed or whole, through the pipeline."""
    return await answer(request, services, "completion")


async def _release(ctx: CompletionsContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.native.get("prompt") or ctx.native.get("input"))
