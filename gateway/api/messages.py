"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, inbound.

Every error is answered in Anthropic's shape (`gateway.anthropic_errors`), so the
anthropic SDK and Claude Code raise their own exception classes with the gateway's message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.anthropic_errors import anthropic_error_response
from gateway.api.chat import read_body
from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError
from gateway.pipeline.messages import handle_count_tokens, handle_messages
from gateway.pipeline.messages_request import MessagesContext
from gateway.pipeline.offload import release
from gateway.request_id import request_id_of
from gateway.services import Services

router = APIRouter()
log = logging.getLogger("farebox.messages")
Handler = Callable[[MessagesContext, Services], Awaitable[Response]]


async def _answer(request: Request, services: Services, handle: Handler) -> Response:
    request_id = request_id_of(request.scope)
    try:
        raw = await read_body(request, services.settings.max_body_bytes)
        ctx = MessagesContext(
            raw_body=raw,
            headers=dict(request.headers),
            request_id=request_id,
            principal=principal_of(request.scope),
        )
        response = await handle(ctx, services)
    except FareboxError as error:
        return anthropic_error_response(error, request_id)
    except Exception:  # a gateway bug: still an answer the client's SDK can read
        log.exception("unhandled error on %s (%s)", request.url.path, request_id)
        internal = FareboxError("internal gateway error; see the gateway log")
        return anthropic_error_response(internal, request_id)
    response.background = BackgroundTask(_release, ctx)
    return response


@router.post("/v1/messages")
async def create_message(request: Request, services: ServicesDep) -> Response:
    """Forward an Anthropic Messages request, streamed or whole, through the pipeline."""
    return await _answer(request, services, handle_messages)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request, services: ServicesDep) -> Response:
    """Forward a Messages token count to the route's upstream."""
    return await _answer(request, services, handle_count_tokens)


async def _release(ctx: MessagesContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.body.get("messages"))
