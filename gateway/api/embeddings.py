"""POST /v1/embeddings: OpenAI's embeddings, inbound (OpenAI's error shape)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.completions import answer
from gateway.api.deps import ServicesDep

router = APIRouter()


@router.post("/v1/embeddings")
async def create_embeddings(request: Request, services: ServicesDep) -> Response:
    """Forward an embeddings request through the pipeline (priced on its input tokens)."""
    return await answer(request, services, "embedding")
