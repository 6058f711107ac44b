"""POST /v1/embeddings: OpenAI's embeddings, inbound (OpenAI's error shape).

Served by `gateway.api.completions.answer` from the app's front (gateway/front.py); the
FastAPI declaration stays for the OpenAPI document and serves the same way.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.completions import EMBEDDINGS_PATH, served
from gateway.api.deps import ServicesDep

router = APIRouter()


@router.post(EMBEDDINGS_PATH)
async def create_embeddings(request: Request, services: ServicesDep) -> Response:
    """Forward an embeddings request through the pipeline (priced on its input tokens)."""
    return await served(request, services, "embedding")
