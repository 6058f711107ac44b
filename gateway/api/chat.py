"""POST /v1/chat/completions.

The hot path is served by `ChatEndpoint`, a plain ASGI app, which `gateway.front.ChatFront`
calls in front of FastAPI (with the request id, in-flight scope, auth and body guard in
one layer); it renders its own errors in OpenAI's shape, as the app's handler does
(docs/performance.md, "Server, framework and workers"). The FastAPI declaration below
stays for the OpenAPI document and serves the same way, through `forward`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from gateway.api.deps import ServicesDep
from gateway.api.release import release_after
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError
from gateway.pipeline.chat import handle_chat
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import release
from gateway.pipeline.parse import check_size
from gateway.request_id import request_id_of
from gateway.schemas.chat import ChatRequest
from gateway.schemas.openapi import openapi_body
from gateway.services import Services

PATH = "/v1/chat/completions"
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


@router.post(PATH, openapi_extra=openapi_body(ChatRequest))
async def chat_completions(request: Request, services: ServicesDep) -> Response:
    """Forward a chat completion, streamed or whole, through the pipeline."""
    raw = await read_body(request, services.settings.max_body_bytes)
    return await forward(request.scope, raw, services)


async def forward(scope: Scope, raw: bytes, services: Services) -> Response:
    """Run the pipeline on `raw`; the response frees the request's data after it is sent."""
    request_id = request_id_of(scope)  # the id the response header and ledger share
    principal = principal_of(scope)  # set by the auth middleware on every request
    ctx = RequestContext(
        raw_body=raw, headers=request_headers(scope), request_id=request_id, principal=principal
    )
    try:
        response = await handle_chat(ctx, services)
    except Exception:
        await _release(ctx)
        raise
    release_after(response, len(raw), _release, ctx)
    return response


class ChatEndpoint:
    """POST /v1/chat/completions as a plain ASGI app, its errors in OpenAI's shape."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services: Services = scope["state"]["services"]
        try:
            raw = await _receive_body(scope, receive, services.settings.max_body_bytes)
        except FareboxError as exc:
            await error_response(exc)(scope, receive, send)
            return
        if raw is not None:  # else the client left before its body arrived: nobody to answer
            await answer(scope, raw, receive, send)


async def answer(scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
    """Answer the chat request `raw`, its `FareboxError`s in OpenAI's shape."""
    try:
        response = await forward(scope, raw, scope["state"]["services"])
    except FareboxError as exc:
        response = error_response(exc)
    await response(scope, receive, send)


def error_response(exc: FareboxError) -> Response:
    """`exc` as the app's handler renders it."""
    headers = getattr(exc, "headers", None) or None
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)


def request_headers(scope: Scope) -> dict[str, str]:
    """The request headers as Starlette's `dict(request.headers)` gives them: first wins."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return headers


async def _receive_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The body (the body guard has buffered it: one message), or None on a disconnect."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            check_size(int(value), limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        check_size(size, limit)
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _release(ctx: RequestContext) -> None:
    """Free a large request's parsed messages beside the loop."""
    messages = ctx.request.messages if ctx.request is not None else None
    prefix, ctx.prefix = [ctx.prefix], None  # its segments too: one per message
    await release(len(ctx.raw_body), ctx.body.get("messages"), messages, prefix)
