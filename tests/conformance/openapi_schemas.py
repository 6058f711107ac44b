"""Validators for OpenAI's published response schemas (the vendored, trimmed OpenAPI file).

The document is OpenAPI 3.1, whose schemas are JSON Schema 2020-12, but a few of them
still carry OpenAPI 3.0's `nullable: true` (a stream chunk's `finish_reason`, `logprobs`
and `usage`), which JSON Schema ignores. The authors mean "or null", so each one is read
as `anyOf: [<schema>, {type: "null"}]`; without that a conforming first chunk
(`"finish_reason": null`) would be refused.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).with_name("openai-openapi.yaml")
URI = "urn:openai-openapi"

CHAT_COMPLETION = "CreateChatCompletionResponse"
CHAT_CHUNK = "CreateChatCompletionStreamResponse"
ERROR = "ErrorResponse"
MODEL_LIST = "ListModelsResponse"


def with_nullable_read(schema: Any) -> Any:
    """`schema` with every OpenAPI 3.0 `nullable: true` turned into an explicit null branch."""
    if isinstance(schema, list):
        return [with_nullable_read(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {k: with_nullable_read(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") is True:
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


@cache
def _registry() -> Registry:
    document = with_nullable_read(yaml.safe_load(DOCUMENT.read_text(encoding="utf-8")))
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    return Registry().with_resource(URI, resource)


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the component schema `name`."""
    schema = {"$ref": f"{URI}#/components/schemas/{name}"}
    return Draft202012Validator(schema, registry=_registry())


def violations(name: str, instance: Any) -> list[str]:
    """Each way `instance` breaks schema `name`, as `path: message`; empty when it conforms."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
