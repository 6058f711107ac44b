"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.pipeline.chat import handle_chat
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import release
from gateway.pipeline.parse import check_size
from gateway.request_id import request_id_of
from gateway.schemas.chat import ChatRequest
from gateway.schemas.openapi import openapi_body

router = APIRouter()


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        check_size(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        check_size(size, limit)
        if chunk:  # one chunk is returned as is, not copied (32 MiB on the loop)
            chunks.append(chunk)
    return b"".join(chunks)


@router.post("/v1/chat/completions", openapi_extra=openapi_body(ChatRequest))
async def chat_completions(request: Request, services: ServicesDep) -> Response:
    """Forward a chat completion, streamed or whole, through the pipeline."""
    raw = await read_body(request, services.settings.max_body_bytes)
    request_id = request_id_of(request.scope)  # the id the response header and ledger share
    principal = principal_of(request.scope)  # set by the auth middleware on every request
    headers = dict(request.headers)
    ctx = RequestContext(raw_body=raw, headers=headers, request_id=request_id, principal=principal)
    try:
        response = await handle_chat(ctx, services)
    except Exception:
        await _release(ctx)
        raise
    # After the last byte (and, for a stream, its booking), never on the loop.
    response.background = BackgroundTask(_release, ctx)
    return response


async def _release(ctx: RequestContext) -> None:
    """Free a large request's parsed messages beside the loop."""
    messages = ctx.request.messages if ctx.request is not None else None
    prefix, ctx.prefix = [ctx.prefix], None  # its segments too: one per message
    await release(len(ctx.raw_body), ctx.body.get("messages"), messages, prefix)
