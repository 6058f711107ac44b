"""A small request's prefix check takes shorter steps to the same values.

- A small record's columns come from the native pass (`record_columns`) where it is
  built, else from the zip: the same record either way, settings included.
- `_shift` looks only at positions inside one of the two records: the same answer as the
  full look-ahead of `_SHIFT_LOOKAHEAD` steps for any records and break.
- `explain` gathers the findings of the broken segment only for a volatile value: the
  same divergence as gathering them always, with and without findings.
- A record read back from its stored JSON (`from_dict`, C-level maps for its columns) is
  the record, and stored settings read as they always did.
- `records_of` hands back the kept record of a kept dict and rebuilds the others, in
  order, whichever are missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pipeline import prefix as prefix_stage
from gateway.prefix import PrefixChecker, PrefixRecord, record, rule_for
from gateway.prefix.compare import Reason, _reason, compare, explain
from gateway.prefix.record import build_record
from gateway.prefix.segments import split_request

# The module, not the package's `compare` function of the same name.
compare_module = importlib.import_module("gateway.prefix.compare")


def _body(turns: int, system: str, extras: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    messages.append({"role": "user", "content": "next"})
    return {"model": "m", "messages": messages, **extras}


_EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.just([{"type": "function", "function": {"name": "f"}}]),
        "reasoning_effort": st.sampled_from(["low", "high", "é" * 300]),
        "service_tier": st.just("flex"),
        "response_format": st.just({"type": "json_object"}),
        "tool_choice": st.just("auto"),
    },
)


@settings(deadline=None)  # a loaded box: no per-example time limit
@given(
    turns=st.integers(0, 25),
    system=st.sampled_from(["", "be brief"]),
    extras=_EXTRAS,
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_a_small_record_is_the_same_without_the_native_columns(
    turns: int, system: str, extras: dict[str, Any], family: str
) -> None:
    rule = rule_for(family)
    request = split_request(_body(turns, system, extras), rule)
    native = build_record(request, rule)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record, "_RECORD_COLUMNS", None)
        zipped = build_record(request, rule)
    assert native == zipped
    assert native.settings == zipped.settings
    assert [type(n) for n in native.cumulative_tokens] == [int] * len(request.segments)


def _full_shift(current: Sequence[str], earlier: Sequence[str], k: int) -> int:
    """`_shift` as it was: every step of the look-ahead, in range or not."""
    for n in range(1, compare_module._SHIFT_LOOKAHEAD + 1):
        if k + n < len(earlier) and current[k] == earlier[k + n]:
            return n
        if k + n < len(current) and current[k + n] == earlier[k]:
            return -n
    return 0


@given(
    current=st.lists(st.sampled_from("abcd"), min_size=1, max_size=14),
    earlier=st.lists(st.sampled_from("abcd"), min_size=1, max_size=14),
    data=st.data(),
)
def test_shift_looks_where_the_full_look_ahead_finds(
    current: list[str], earlier: list[str], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, min(len(current), len(earlier)) - 1))
    assert compare_module._shift(current, earlier, k) == _full_shift(current, earlier, k)


def _history(checker: PrefixChecker, bodies: list[dict[str, Any]], family: str) -> list[Any]:
    rule, kept = rule_for(family), []
    for body in bodies:
        kept.insert(0, checker.check(body, rule, kept[:4]).record)
    return kept[:4]


@settings(deadline=None)
@given(
    turns=st.integers(0, 6),
    volatile=st.booleans(),
    extras=_EXTRAS,
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_explain_gathers_hits_only_for_a_volatile_value(
    turns: int, volatile: bool, extras: dict[str, Any], family: str
) -> None:
    checker, rule = PrefixChecker(), rule_for(family)
    stamp = "2026-12-02T16:00:00Z" if volatile else "hello"
    history = _history(checker, [_body(turns, "be brief", {}), _body(turns, "x", extras)], family)
    check = checker.check(_body(turns, f"be brief {stamp}", extras), rule, history)
    comparison = compare(check.record, history, rule, explain_divergence=False)
    if comparison.closest is None:
        return
    findings = check.findings
    got = explain(check.record, comparison.closest, comparison.matched, rule, findings)
    if got is None:
        return
    reason, _ = _reason(check.record, comparison.closest, comparison.matched, findings)
    name = check.record.segment_names[comparison.matched]
    hits = tuple(f for f in findings if f.segment == name)
    assert got.findings == (hits if reason is Reason.VOLATILE_VALUE else ())
    assert got.reason is reason


@settings(deadline=None)
@given(
    turns=st.integers(0, 5),
    system=st.sampled_from(["", "be brief"]),
    extras=_EXTRAS,
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_a_record_read_back_from_json_is_the_record(
    turns: int, system: str, extras: dict[str, Any], family: str
) -> None:
    checker, rule = PrefixChecker(), rule_for(family)
    made = checker.check(_body(turns, system, extras), rule).record
    read = PrefixRecord.from_dict(orjson.loads(orjson.dumps(made.to_dict())))
    assert read == made
    assert read.settings == made.settings
    assert read.fingerprints == made.fingerprints
    assert [type(n) for n in read.cumulative_tokens] == [int] * len(made.cumulative_tokens)


def test_a_stored_record_s_settings_read_as_before() -> None:
    stored = PrefixChecker().check(_body(0, "", {}), rule_for("openai")).record.to_dict()
    assert PrefixRecord.from_dict({**stored, "settings": [["effort", "high"]]}).settings == {
        "effort": "high"
    }
    assert PrefixRecord.from_dict({**stored, "settings": []}).settings == {}
    with pytest.raises(TypeError):
        PrefixRecord.from_dict({**stored, "settings": None})  # as dict(None) always did


def test_records_of_rebuilds_only_the_dicts_it_does_not_keep() -> None:
    checker, rule = PrefixChecker(), rule_for("openai")
    made = [checker.check(_body(i, "", {}), rule).record for i in range(4)]
    stored = [record.to_dict() for record in made]
    kept = prefix_stage.records_of(stored[:2])  # these two are kept now
    fresh = [dict(item) for item in stored[2:]]  # equal dicts, not the kept ones
    got = prefix_stage.records_of([stored[0], fresh[0], stored[1], fresh[1]])
    assert got == [made[0], made[2], made[1], made[3]]
    assert got[0] is kept[0] and got[2] is kept[1]  # kept ones are the very records
    again = prefix_stage.records_of([stored[0], stored[1]])
    assert again[0] is kept[0] and again[1] is kept[1]
