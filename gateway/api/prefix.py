"""POST /v1/prefix/lint: what in a prompt would break prompt caching, without calling a model."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request

from gateway.api.chat import read_body
from gateway.api.deps import ServicesDep
from gateway.config import GatewayConfig
from gateway.pipeline.offload import sized
from gateway.pipeline.prefix import cache_family
from gateway.prefix.lint import lint_conversation
from gateway.schemas.body import load_object
from gateway.schemas.chat import ChatRequest
from gateway.schemas.lint import LintConversation, lint_bodies
from gateway.schemas.openapi import openapi_body

router = APIRouter()


@router.post("/v1/prefix/lint", openapi_extra=openapi_body(ChatRequest | LintConversation))
async def lint(request: Request, services: ServicesDep) -> dict[str, Any]:
    """Lint one chat request, or `{"requests": [...]}`: a recorded conversation, oldest first."""
    raw = await read_body(request, services.settings.max_body_bytes)
    # Lint scans everything, with no budget: megabytes are read beside the loop.
    return await sized(len(raw), _lint, raw, services.config)


def _lint(raw: bytes, config: GatewayConfig) -> dict[str, Any]:
    bodies = lint_bodies(load_object(raw))
    route = config.models.get(str(bodies[-1].get("model")))
    family = cache_family(route.wire_family) if route is not None else None
    report = lint_conversation(bodies, family=family)
    document: dict[str, Any] = orjson.loads(report.to_json())
    return {"object": "prefix.lint", "clean": report.clean, **document}
