"""POST /v1/completions: OpenAI's legacy text completions, inbound (OpenAI's error shape).

Served (as /v1/embeddings, gateway/api/embeddings.py) by `answer` from the app's front
(gateway/front.py); the FastAPI declarations stay for the OpenAPI document and serve
through the same `respond`.
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
from gateway.pipeline.completions import handle_completions
from gateway.pipeline.completions_request import CompletionsContext, Kind
from gateway.pipeline.offload import release
from gateway.request_id import request_id_of
from gateway.services import Services

PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
router = APIRouter()


async def answer(scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
    """Answer the completion or embeddings request `raw`, its errors in OpenAI's shape."""
    kind: Kind = "embedding" if scope["path"] == EMBEDDINGS_PATH else "completion"
    try:
        response = await respond(scope, raw, scope["state"]["services"], kind)
    except FareboxError as exc:
        response = error_response(exc)
    await response(scope, receive, send)


async def respond(scope: Scope, raw: bytes, services: Services, kind: Kind) -> Response:
    """The completions pipeline's response for `kind`; a FareboxError is the caller's."""
    ctx = CompletionsContext(
        raw_body=raw,
        headers=request_headers(scope),
        request_id=request_id_of(scope),
        principal=principal_of(scope),
        kind=kind,
    )
    response = await handle_completions(ctx, services)
    release_after(response, len(raw), _release, ctx)
    return response


async def served(request: Request, services: Services, kind: Kind) -> Response:
    """The FastAPI route's answer: the body read, then `respond`."""
    raw = await read_body(request, services.settings.max_body_bytes)
    return await respond(request.scope, raw, services, kind)  # FareboxError: the app's


@router.post(PATH)
async def create_completion(request: Request, services: ServicesDep) -> Response:
    """Forward a text completion, streamed or whole, through the pipeline."""
    return await served(request, services, "completion")


async def _release(ctx: CompletionsContext) -> None:
    """Free a large request's parsed body beside the loop."""
    await release(len(ctx.raw_body), ctx.native.get("prompt") or ctx.native.get("input"))
