"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.deps import ServicesDep
from gateway.pipeline.chat import handle_chat
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import check_size
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
        chunks.append(chunk)
    return b"".join(chunks)


@router.post("/v1/chat/completions", openapi_extra=openapi_body(ChatRequest))
async def chat_completions(request: Request, services: ServicesDep) -> Response:
    """Forward a chat completion, streamed or whole, through the pipeline."""
    raw = await read_body(request, services.settings.max_body_bytes)
    ctx = RequestContext(raw_body=raw, headers=dict(request.headers))
    return await handle_chat(ctx, services)
