"""Pure rewrites: normalize, sticky cache key, Anthropic breakpoints, strict mode."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gateway.prefix import (
    PrefixChecker,
    anthropic_cache_breakpoints,
    apply_breakpoints,
    build_record,
    normalize,
    rule_for,
    split_request,
    sticky_cache_key,
    strict_error_message,
    strict_violations,
)
from gateway.prefix.breakpoints import MAX_ANTHROPIC_BREAKPOINTS

SCHEMA = {
    "type": "object",
    "required": ["reasoning", "answer"],
    "properties": {
        "reasoning": {"type": "string", "description": "think first"},
        "answer": {"description": "then answer", "type": "string"},
    },
}


def _body() -> dict[str, Any]:
    return {
        "model": "gpt-5",
        "temperature": 0.2,
        "tools": [
            {"type": "function", "function": {"parameters": SCHEMA, "name": "zeta"}},
            {"function": {"name": "alpha", "description": "a"}, "type": "function"},
        ],
        "response_format": {
            "json_schema": {"schema": SCHEMA, "name": "out"},
            "type": "json_schema",
        },
        "messages": [{"role": "user", "content": "hi"}],
    }


def _key_order(value: Any) -> Any:
    """Return the value with every object's key order made visible (for order assertions)."""
    if isinstance(value, dict):
        return [[k, _key_order(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [_key_order(v) for v in value]
    return value


def test_normalize_preserves_semantics_and_reports_fields() -> None:
    body = _body()
    original = copy.deepcopy(body)
    out, changed = normalize(body)
    assert changed == ["tools", "response_format"]
    assert body == original  # the input is not mutated
    assert out["messages"] is body["messages"] and out["temperature"] == 0.2
    # Same JSON content (dict equality ignores order); tools sorted by name.
    assert [t["function"]["name"] for t in out["tools"]] == ["alpha", "zeta"]
    assert sorted(out["tools"], key=str) == sorted(body["tools"], key=str)
    assert out["response_format"] == body["response_format"]


def test_normalize_sorts_keywords_but_keeps_property_order() -> None:
    out, _ = normalize(_body())
    schema = out["tools"][1]["function"]["parameters"]
    assert list(schema) == ["properties", "required", "type"]
    assert list(schema["properties"]) == ["reasoning", "answer"]  # generation order is meaning
    assert list(schema["properties"]["answer"]) == ["description", "type"]
    sorted_out, _ = normalize(_body(), sort_properties=True)
    props = sorted_out["tools"][1]["function"]["parameters"]["properties"]
    assert list(props) == ["answer", "reasoning"]


def test_normalize_is_idempotent() -> None:
    once, _ = normalize(_body())
    twice, changed = normalize(once)
    assert changed == []
    assert _key_order(twice) == _key_order(once)


def test_normalize_makes_differently_ordered_requests_identical() -> None:
    a = _body()
    b = _body()
    b["tools"] = list(reversed(b["tools"]))
    b["tools"][1]["function"]["parameters"] = dict(reversed(list(SCHEMA.items())))
    rule = rule_for("openai")
    ra = build_record(split_request(normalize(a)[0], rule), rule)
    rb = build_record(split_request(normalize(b)[0], rule), rule)
    assert ra.segment_digests == rb.segment_digests


def test_normalize_keeps_tool_order_when_a_tool_carries_a_cache_marker() -> None:
    body = _body()
    body["tools"][1]["cache_control"] = {"type": "ephemeral"}
    out, _ = normalize(body)
    assert [t["function"]["name"] for t in out["tools"]] == ["zeta", "alpha"]


def test_sticky_cache_key_is_stable_and_respects_the_client() -> None:
    body = _body()
    key = sticky_cache_key(body, "team-a", "abc")
    assert key == sticky_cache_key(copy.deepcopy(body), "team-a", "abc")
    assert key.startswith("fbx-") and len(key) <= 64
    assert key != sticky_cache_key(body, "team-b", "abc")
    assert key != sticky_cache_key(body, "team-a", "abd")
    assert sticky_cache_key({**body, "prompt_cache_key": "mine"}, "team-a", "abc") == "mine"


def _anthropic_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "tools": [{"type": "function", "function": {"name": "read"}}],
        "messages": [
            {"role": "system", "content": "system " * 900},
            {"role": "user", "content": "question one " * 100},
            {"role": "assistant", "content": "answer one " * 100},
            {"role": "user", "content": "question two"},
        ],
    }
    body.update(extra)
    return body


def test_breakpoints_at_the_last_stable_boundaries() -> None:
    rule = rule_for("anthropic")
    request = split_request(_anthropic_body(), rule)
    positions = anthropic_cache_breakpoints(request.segments, request.stable_count)
    names = [request.segments[i].name for i in positions]
    assert names == ["tools", "system", "messages[2]", "messages[3]"]


def test_breakpoints_respect_existing_ones_and_the_minimum() -> None:
    rule = rule_for("anthropic")
    body = _anthropic_body()
    body["messages"][1]["content"] = [
        {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}
    ]
    request = split_request(body, rule)
    record = build_record(request, rule)
    positions = anthropic_cache_breakpoints(
        request.segments,
        request.stable_count,
        cumulative_tokens=record.cumulative_tokens,
        min_tokens=1024,
    )
    assert len(positions) + 1 <= MAX_ANTHROPIC_BREAKPOINTS
    assert all(record.cumulative_tokens[i] >= 1024 for i in positions)
    assert "tools" not in [request.segments[i].name for i in positions]


def test_apply_breakpoints_marks_content_and_reports_fields() -> None:
    rule = rule_for("anthropic")
    body = _anthropic_body()
    request = split_request(body, rule)
    positions = anthropic_cache_breakpoints(request.segments, request.stable_count)
    out, changed = apply_breakpoints(body, request, positions)
    assert changed == ["tools", "messages"]
    assert out["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [m for m in out["messages"] if isinstance(m["content"], list)]
    assert len(marked) == 3
    assert all(m["content"][-1]["cache_control"] == {"type": "ephemeral"} for m in marked)
    assert body["messages"][0]["content"].startswith("system")  # input untouched
    # Markers are not prompt text: the fingerprints do not move.
    before = build_record(request, rule)
    after = build_record(split_request(out, rule), rule)
    assert after.segment_digests == before.segment_digests
    assert len(after.breakpoints) == 4


def test_strict_mode_lists_what_is_volatile_and_where() -> None:
    body = _anthropic_body()
    body["messages"][0]["content"] += " Request 3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b."
    result = PrefixChecker().check(body, rule_for("anthropic"))
    violations = strict_violations(result.findings, result.divergence)
    assert [(v.segment, v.kind) for v in violations] == [("system", "uuid")]
    message = strict_error_message(violations)
    assert "3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b" in message and "system" in message
    assert json.dumps(message)  # plain text, ready for the OpenAI error envelope


@pytest.mark.parametrize("content", ["plain words only", "v1.2.3 at $1,299.00"])
def test_strict_mode_passes_clean_prompts(content: str) -> None:
    body = _anthropic_body()
    body["messages"][0]["content"] = content
    result = PrefixChecker().check(body, rule_for("anthropic"))
    assert strict_violations(result.findings, result.divergence) == []
