"""Pure rewrites that make a prompt cache better, returning the top-level fields they changed.

The caller patches only those fields into the client's raw bytes (`gateway.rawjson`), so
everything else reaches the upstream byte for byte. Order in the pipeline: `normalize`,
then the prefix check (it must see what the upstream will see), then cache breakpoints
(markers are ignored by fingerprints, so adding them changes no fingerprint).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gateway.prefix.segments import tool_name

_SCHEMA_MAPS = frozenset({"properties", "patternProperties"})
_SCHEMA_KEYS = frozenset({"parameters", "input_schema", "schema", "json_schema"})
_MARKERS = ("cache_control", "prompt_cache_breakpoint")
STICKY_KEY_PREFIX = "fbx-"


def canonical_schema(schema: Any, *, sort_properties: bool = False) -> Any:
    """Return a JSON schema with sorted keywords; property order kept unless asked.

    Property order is meaning, not noise: structured outputs and strict tool calls
    generate fields in schema order, so a "reasoning" field placed before "answer" matters.
    """
    if isinstance(schema, list):
        return [canonical_schema(item, sort_properties=sort_properties) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key in sorted(schema):
        value = schema[key]
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            names = sorted(value) if sort_properties else list(value)
            out[key] = {
                n: canonical_schema(value[n], sort_properties=sort_properties) for n in names
            }
        else:
            out[key] = canonical_schema(value, sort_properties=sort_properties)
    return out


def _canonical_tool(tool: Any, sort_properties: bool) -> Any:
    if not isinstance(tool, dict):
        return tool
    out: dict[str, Any] = {}
    for key in sorted(tool):
        value = tool[key]
        if key in _SCHEMA_KEYS:
            out[key] = canonical_schema(value, sort_properties=sort_properties)
        elif isinstance(value, dict):
            out[key] = _canonical_tool(value, sort_properties)
        else:
            out[key] = value
    return out


def _has_marker(tool: Any) -> bool:
    return isinstance(tool, dict) and any(m in tool for m in _MARKERS)


def normalize(
    body: Mapping[str, Any], *, sort_properties: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Return `body` with canonical tool and schema serialisation, and the fields changed.

    Semantics-preserving only: JSON object key order carries no meaning except a schema's
    property order (kept, see `canonical_schema`). Tools are sorted by name unless one
    carries a cache marker, whose place at the end of the list is what caches the tools.
    """
    out = dict(body)
    changed: list[str] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        new_tools = [_canonical_tool(tool, sort_properties) for tool in tools]
        if not any(_has_marker(tool) for tool in tools):
            new_tools.sort(key=tool_name)
        if _differs(new_tools, tools):
            out["tools"] = new_tools
            changed.append("tools")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and "json_schema" in response_format:
        new_format = _canonical_tool(response_format, sort_properties)
        if _differs(new_format, response_format):
            out["response_format"] = new_format
            changed.append("response_format")
    return out, changed


def _differs(a: Any, b: Any) -> bool:
    """Return whether two JSON values differ in content or in key order at any depth."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) != list(b) or any(_differs(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is not type(b) or a != b


def sticky_cache_key(body: Mapping[str, Any], caller: str, fingerprint: str) -> str:
    """Return the OpenAI `prompt_cache_key` to send: the client's own, else a stable one.

    Derived from the caller and the fingerprint of the shared head (tools, system and
    settings; `PrefixRecord.head_fingerprint`), so one agent's requests land on the same
    cache shard step after step while different callers do not crowd one key.
    """
    sent = body.get("prompt_cache_key")
    if isinstance(sent, str) and sent:
        return sent
    seed = f"{caller}\0{fingerprint}".encode()
    return STICKY_KEY_PREFIX + hashlib.sha256(seed).hexdigest()[:32]
