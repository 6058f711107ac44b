"""Prefix comparison against history: expected cache, and where and why it diverged."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.prefix import PrefixChecker, PrefixRecord, Reason, compare, longest_seen, rule_for
from gateway.prefix.compare import common_prefix

LONG = "You are a careful agent. " * 300
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "write", "parameters": {"type": "object"}}},
]


def _body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "tools": copy.deepcopy(TOOLS),
        "messages": [
            {"role": "system", "content": LONG},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer " * 50},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": "second answer " * 50},
            {"role": "user", "content": "third question"},
        ],
    }
    body.update(extra)
    return body


def _record(body: dict[str, Any], family: str = "openai") -> PrefixRecord:
    return PrefixChecker().fingerprint(body, rule_for(family))


def _reason(before: dict[str, Any], after: dict[str, Any], family: str = "openai") -> Reason:
    rule = rule_for(family)
    result = PrefixChecker().check(after, rule, [_record(before, family)])
    assert result.divergence is not None
    return result.divergence.reason


def test_extending_the_previous_request_is_not_a_divergence() -> None:
    before = _body()
    after = _body()
    after["messages"] += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    result = PrefixChecker().check(after, rule_for("openai"), [_record(before)])
    assert result.divergence is None
    assert result.expectation.matched_segments == len(_record(before).segment_digests)
    assert result.expectation.cached_tokens >= 1024


def test_volatile_value_is_named_with_its_finding() -> None:
    before = _body()
    before["messages"][0]["content"] = LONG + "Now: 2026-03-12T14:03:07Z"
    after = _body()
    after["messages"][0]["content"] = LONG + "Now: 2026-03-12T14:04:10Z"
    result = PrefixChecker().check(after, rule_for("openai"), [_record(before)])
    assert result.divergence is not None
    assert result.divergence.reason is Reason.VOLATILE_VALUE
    assert result.divergence.segment == "system"
    assert [f.text for f in result.divergence.findings] == ["2026-03-12T14:04:10Z"]
    assert result.divergence.avoidable


def test_edited_history() -> None:
    after = _body()
    after["messages"][2]["content"] = "first answer, edited"
    assert _reason(_body(), after) is Reason.EDITED_HISTORY


def test_removed_message_is_edited_history() -> None:
    before = _body()
    before["messages"] += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]
    after = copy.deepcopy(before)
    del after["messages"][2:4]
    result = PrefixChecker().check(after, rule_for("openai"), [_record(before)])
    assert result.divergence is not None
    assert result.divergence.reason is Reason.EDITED_HISTORY
    assert "removed" in result.divergence.detail


def test_changed_tool_definitions() -> None:
    after = _body()
    after["tools"][0]["function"]["description"] = "Read any file."
    assert _reason(_body(), after) is Reason.TOOLS_CHANGED


def test_reordered_tool_json() -> None:
    after = _body()
    after["tools"] = list(reversed(after["tools"]))
    assert _reason(_body(), after) is Reason.REORDERED_JSON
    keys = _body()
    function = keys["tools"][0]["function"]
    keys["tools"][0]["function"] = dict(reversed(list(function.items())))
    assert _reason(_body(), keys) is Reason.REORDERED_JSON


@pytest.mark.parametrize(
    ("family", "setting", "reason"),
    [
        ("openai", {"reasoning_effort": "high"}, Reason.EFFORT_CHANGED),
        (
            "anthropic",
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            Reason.EFFORT_CHANGED,
        ),
        ("anthropic", {"output_config": {"effort": "low"}}, Reason.EFFORT_CHANGED),
        ("vllm", {"chat_template_kwargs": {"enable_thinking": False}}, Reason.EFFORT_CHANGED),
        ("anthropic", {"speed": "fast"}, Reason.SPEED_CHANGED),
        ("anthropic", {"service_tier": "priority"}, Reason.SPEED_CHANGED),
        ("openai", {"tool_choice": "required"}, Reason.TOOL_CHOICE_CHANGED),
        ("anthropic", {"tool_choice": "required"}, Reason.TOOL_CHOICE_CHANGED),
    ],
)
def test_changed_settings(family: str, setting: dict[str, Any], reason: Reason) -> None:
    assert _reason(_body(), _body(**setting), family) is reason


def test_anthropic_effort_change_keeps_tools_and_system_cached() -> None:
    rule = rule_for("anthropic")
    result = PrefixChecker().check(
        _body(reasoning_effort="high"), rule, [_record(_body(), "anthropic")]
    )
    assert result.divergence is not None
    assert result.divergence.invalidates == ("effort", "messages")
    assert result.record.segment_names[result.divergence.index] == "effort"


def test_openai_does_not_render_speed() -> None:
    result = PrefixChecker().check(
        _body(service_tier="priority"), rule_for("openai"), [_record(_body())]
    )
    assert result.divergence is None


def test_response_format_changed() -> None:
    before = _body(response_format={"type": "json_object"})
    after = _body(response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    assert _reason(before, after) is Reason.RESPONSE_FORMAT_CHANGED


def test_system_changed_and_request_specific_prefix() -> None:
    other = _body()
    other["messages"][0]["content"] = "A different persona entirely."
    other["messages"][1:] = [{"role": "user", "content": "unrelated"}]
    assert _reason(_body(), other) is Reason.SYSTEM_CHANGED
    profile = _body()
    profile["messages"][0]["content"] = LONG + "User profile: Bob, free tier, Leeds."
    assert _reason(_body(), profile) is Reason.REQUEST_SPECIFIC_PREFIX


def test_a_different_newest_turn_is_a_branch_not_a_problem() -> None:
    before = _body()
    after = _body()
    after["messages"][5] = {"role": "user", "content": "a different third question"}
    result = PrefixChecker().check(after, rule_for("openai"), [_record(before)])
    assert result.divergence is not None
    assert result.divergence.reason is Reason.BRANCHED
    assert not result.divergence.avoidable


def test_model_change() -> None:
    assert _reason(_body(), _body(model="other")) is Reason.MODEL_CHANGED


def test_closest_record_wins_and_newest_breaks_ties() -> None:
    rule = rule_for("openai")
    far = _record(_body(model="other"))
    near = _record(_body())
    result = compare(_record(_body()), [near, far], rule)
    assert result.closest is near
    twin = _record(_body())
    assert compare(_record(_body()), [near, twin], rule).closest is twin


def test_common_prefix_and_longest_seen() -> None:
    a = _record(_body())
    edited = _body()
    edited["messages"][4]["content"] = "changed"
    b = _record(edited)
    shared = common_prefix(a, b)
    assert b.segment_names[shared] == "messages[4]"
    seen = set(a.fingerprints)
    assert longest_seen(b.fingerprints, seen.__contains__) == shared
    assert longest_seen(a.fingerprints, seen.__contains__) == len(a.fingerprints)


def test_a_timestamp_inside_tool_definitions_is_named_as_volatile() -> None:
    before = _body()
    before["tools"][0]["function"]["description"] = "Read a file. Index built 2026-03-12T06:00:00Z."
    after = _body()
    after["tools"][0]["function"]["description"] = "Read a file. Index built 2026-03-12T07:00:00Z."
    result = PrefixChecker().check(after, rule_for("anthropic"), [_record(before, "anthropic")])
    assert result.divergence is not None
    assert (result.divergence.segment, result.divergence.reason) == ("tools", Reason.VOLATILE_VALUE)
    assert result.divergence.invalidates[0] == "tools" and result.divergence.index == 0
