"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, inbound.

Every error is answered in Anthropic's shape (`gateway.anthropic_errors`), so the
anthropic SDK and Claude Code raise their own exception classes with the gateway's message.
Both paths are served by `answer` from the app's front (gateway/front.py); the FastAPI
declarations below stay for the OpenAPI document and serve through the same `respond`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.anthropic_errors import anthropic_error_response
from gateway.api.chat import read_body, request_headers
from gateway.api.deps import ServicesDep
from gateway.api.release import release_after
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError
from gateway.pipeline.messages import handle_count_tokens, handle_messages
from gateway.pipeline.messages_request import MessagesContext
from gateway.pipeline.offload import release
from gateway.request_id import request_id_of
from gateway.services import Services

PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
router = APIRouter()
log = logging.getLogger("farebox.messages")
Handler = Callable[[MessagesContext, Services], Awaitable[Response]]


async def answer(scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
    """Answer the Messages request `raw` (at either path), every error in Anthropic's shape."""
    handle = handle_count_tokens if scope["path"] == COUNT_TOKENS_PATH else handle_messages
    response = await respond(scope, raw, scope["state"]["services"], handle)
    await response(scope, receive, send)


async def respond(scope: Scope, raw: bytes, services: Services, handle: Handler) -> Response:
    """`handle`'s response to `raw`; an error, even a gateway bug, in Anthropic's shape."""
    request_id = request_id_of(scope)
    try:
        ctx = MessagesContext(
            raw_body=raw,
            headers=request_headers(scope),
            request_id=request_id,
            principal=principal_of(scope),
        )
        response = await handle(ctx, services)
    except FareboxError as error:
        return anthropic_error_response(error, request_id)
    except Exception:  # a gateway bug: still an answer the client's SDK can read
        log.exception("unhandled error on %s (%s)", scope["path"], request_id)
        internal = FareboxError("internal gateway error; see the gateway log")
        return anthropic_error_response(internal, request_id)
    release_after(response, len(raw), _release, ctx)
    return response


async def _served(request: Request, services: Services, handle: Handler) -> Response:
    try:
        raw = await read_body(request, services.settings.max_body_bytes)
    except FareboxError as error:
        return anthropic_error_response(error, request_id_of(request.scope))
    return await respond(request.scope, raw, services, handle)


@router.post(PATH)
async def create_message(request: Request, services: ServicesDep) -> Response:
    """Forward an Anthropic Messages request, streamed or whole, through the pipeline."""
    return await _served(request, services, handle_messages)


@router.post(COUNT_TOKENS_PATH)
async def count_tokens(request: Request, services: ServicesDep) -> Response:
    """Forward a Messages token count to the route's upstream."""
    return await _served(request, services, handle_count_tokens)


async def _release(ctx: MessagesContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.body.get("messages"))
