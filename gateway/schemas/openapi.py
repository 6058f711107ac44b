"""Request-body schemas for routes that read their body raw, so /openapi.json describes them.

The chat and lint routes read bytes (to forward them unchanged), so FastAPI cannot see
their body model; `openapi_body` puts the pydantic type's JSON schema in the route's
OpenAPI entry instead, with `$defs` inlined (a route's schema cannot point at its own
`$defs`), for clients, docs and schema-driven fuzzing alike.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter


def openapi_body(body_type: Any) -> dict[str, Any]:
    """`openapi_extra` for a route whose JSON body is `body_type` (a model, or a union)."""
    schema = TypeAdapter(body_type).json_schema()
    defs = schema.pop("$defs", {})
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _inline(schema, defs)}},
        }
    }


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with each `{"$ref": "#/$defs/X"}` replaced by X (the models are not recursive)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node
