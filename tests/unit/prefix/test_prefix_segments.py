"""Segments in render order, canonical bytes, and the fingerprint chain."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import PrefixRecord, build_record, rule_for, split_request
from gateway.prefix import segments as segments_module
from gateway.prefix.record import chain_fingerprints
from gateway.prefix.segments import dump_each

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "m",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "developer", "content": "dev"},
            {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"},
            {"role": "assistant", "content": None, "tool_calls": []},
        ],
    }
    body.update(extra)
    return body


@pytest.mark.parametrize(
    ("family", "header"),
    [
        ("openai", ["effort", "system", "tools", "tool_choice", "response_format"]),
        ("anthropic", ["tools", "speed", "system", "tool_choice", "effort"]),
        ("vllm", ["effort", "system", "tools", "tool_choice"]),
        ("sglang", ["effort", "system", "tools", "tool_choice"]),
    ],
)
def test_segments_follow_the_family_render_order(family: str, header: list[str]) -> None:
    request = split_request(_body(), rule_for(family))
    messages = ["messages[2]", "messages[3]", "messages[4]", "messages[5]"]
    assert request.names() == [*header, *messages]
    assert request.header_count == len(header)


def test_leading_system_and_developer_messages_form_one_segment() -> None:
    request = split_request(_body(), rule_for("openai"))
    system = next(s for s in request.segments if s.name == "system")
    assert orjson.loads(system.data) == _body()["messages"][:2]


def test_stable_part_ends_before_the_newest_user_turn() -> None:
    request = split_request(_body(), rule_for("openai"))
    stable = [s.name for s in request.segments[: request.stable_count]]
    assert stable[-2:] == ["messages[2]", "messages[3]"]


def test_canonical_bytes_keep_the_client_key_order() -> None:
    a = _body(messages=[{"role": "user", "content": "x"}])
    b = _body(messages=[{"content": "x", "role": "user"}])
    rule = rule_for("openai")
    sa, sb = split_request(a, rule).segments[-1], split_request(b, rule).segments[-1]
    assert sa.data == b'{"role":"user","content":"x"}'
    assert sa.digest != sb.digest


def test_cache_markers_do_not_change_the_digest_but_are_noted() -> None:
    rule = rule_for("anthropic")
    plain = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    marked = {"role": "user", "content": [{"type": "text", "text": "hello", "cache_control": {}}]}
    a = split_request(_body(messages=[plain]), rule).segments[-1]
    b = split_request(_body(messages=[marked]), rule).segments[-1]
    assert a.digest == b.digest
    assert b.breakpoint and not a.breakpoint


def test_settings_are_gathered_into_their_segments() -> None:
    body = _body(reasoning_effort="high", output_config={"effort": "low"}, speed="fast")
    segments = {s.name: s for s in split_request(body, rule_for("anthropic")).segments}
    assert orjson.loads(segments["effort"].data) == {
        "reasoning_effort": "high",
        "output_config.effort": "low",
    }
    assert orjson.loads(segments["speed"].data) == {"speed": "fast"}


def test_dump_each_matches_separate_dumps() -> None:
    values: list[Any] = [{"a": 1, "s": 'x","y'}, [1, 2], "plain", None]
    assert dump_each(values) == [orjson.dumps(v) for v in values]


def test_dump_each_falls_back_where_orjson_refuses() -> None:
    values: list[Any] = [{"n": 2**70}, "x"]
    assert [json.loads(piece) for piece in dump_each(values)] == values


def test_fingerprints_share_exactly_the_common_prefix() -> None:
    rule = rule_for("openai")
    first = build_record(split_request(_body(), rule), rule)
    edited = _body()
    edited["messages"][3] = {"role": "assistant", "content": "changed"}
    second = build_record(split_request(edited, rule), rule)
    index = second.segment_names.index("messages[3]")
    assert first.fingerprints[:index] == second.fingerprints[:index]
    tails = zip(first.fingerprints[index:], second.fingerprints[index:], strict=True)
    assert all(a != b for a, b in tails)


def test_fingerprints_differ_across_models() -> None:
    rule = rule_for("openai")
    a = build_record(split_request(_body(), rule), rule)
    b = build_record(split_request(_body(model="other"), rule), rule)
    assert a.segment_digests == b.segment_digests
    assert not set(a.fingerprints) & set(b.fingerprints)


def test_record_round_trips_through_a_dict() -> None:
    rule = rule_for("anthropic")
    record = build_record(split_request(_body(reasoning_effort="low"), rule), rule)
    again = PrefixRecord.from_dict(orjson.loads(orjson.dumps(record.to_dict())))
    assert again == record
    assert again.fingerprints == record.fingerprints
    assert again.settings == {"effort": '{"reasoning_effort":"low"}'}


def test_chain_is_a_hash_chain_over_digests() -> None:
    rule = rule_for("openai")
    record = build_record(split_request(_body(), rule), rule)
    shorter = chain_fingerprints("openai", "m", record.segment_digests[:3])
    assert record.fingerprints[:3] == shorter
    assert record.head_fingerprint == record.fingerprints[record.header_count - 1]


def test_token_estimates_are_cumulative_quarter_bytes() -> None:
    rule = rule_for("openai")
    request = split_request(_body(), rule)
    record = build_record(request, rule)
    assert record.cumulative_tokens[-1] == sum((len(s.data) + 3) // 4 for s in request.segments)
    custom = build_record(request, rule, counter=len)
    assert custom.total_tokens == sum(len(s.data) for s in request.segments)


_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "cache_control", "content", "type"]), inner)
    ),
    max_leaves=8,
)
_MESSAGE = (
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "system", "tool"]) | st.integers(0, 3),
            "content": _VALUE,
            "cache_control": st.just({"type": "ephemeral"}),
            "prompt_cache_breakpoint": st.booleans(),
            "tool_calls": _VALUE,
        },
    )
    | _VALUE
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, max_size=12), st.booleans(), st.integers(0, 3))
def test_plain_messages_cut_in_c_level_maps_are_the_loop_s_segments(
    messages: list[Any], system: bool, untrack_every: int
) -> None:
    """Whatever the messages, the cut with the plain path allowed is the loop's cut."""
    body = {"model": "m", "messages": ([{"role": "system", "content": "s"}] if system else [])}
    body["messages"] += messages
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segments_module, "UNTRACK_EVERY", untrack_every + 1)
        fast = split_request(body, RULE_OPENAI)
        patch.setattr(segments_module.rawjson, "list_or_marker", lambda raw: True)  # the loop
        slow = split_request(body, RULE_OPENAI)
    assert fast == slow
    assert [type(s) for s in fast.segments] == [type(s) for s in slow.segments]


def test_a_plain_conversation_takes_the_c_level_path() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    calls: list[int] = []
    plain = segments_module._plain_segments

    def counted(*args: Any) -> Any:
        calls.append(1)
        return plain(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segments_module, "_plain_segments", counted)
        split_request({"model": "m", "messages": messages}, RULE_OPENAI)
        assert calls
        marked = [*messages, {"role": "user", "content": [{"type": "text", "text": "x"}]}]
        calls.clear()
        split_request({"model": "m", "messages": marked}, RULE_OPENAI)
        assert not calls


RULE_OPENAI = rule_for("openai")
