"""The prefix check's values built through `gateway.frozen.mutable_twin` are the frozen
dataclasses themselves, equal to what their own constructors build.

- `with_reported_tokens` is `dataclasses.replace(record, reported_prompt_tokens=n)`: equal,
  frozen, the chain list shared as `replace` shares it.
- A check's `PrefixCheck`, record, segments, expectation, comparison and divergence, and a
  verdict, have their classes' own types, are frozen, and equal the objects those classes
  build from the same fields.
- A small record is the zip of its segments, for any header parts, family and length,
  at first and second sight of its header.
- `common_prefix` finds the first unequal pair wherever it lies, early or late, in records
  longer than its linear cut-off.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from itertools import accumulate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import PrefixChecker, PrefixRecord, rule_for
from gateway.prefix.compare import common_prefix
from gateway.prefix.record import build_record, with_reported_tokens, written_breakpoints
from gateway.prefix.segments import SegmentKind, split_request
from gateway.prefix.verdict import verdict


def _rebuilt(value: Any) -> Any:
    """`value` built again through its class's own (frozen) constructor."""
    cls = type(value)
    return cls(**{f.name: getattr(value, f.name) for f in dataclasses.fields(cls)})


def _assert_frozen_equal(value: Any) -> None:
    assert dataclasses.is_dataclass(value)
    assert value == _rebuilt(value)
    first = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, getattr(value, first))


def _body(turns: int, system: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    messages.append({"role": "user", "content": "next"})
    return {"model": "m", "messages": messages}


@settings(deadline=None)  # a loaded box: no per-example time limit
@given(turns=st.integers(0, 80), system=st.sampled_from(["", "be brief", "be kind"]))
def test_a_check_builds_its_classes_own_frozen_values(turns: int, system: str) -> None:
    rule, checker = rule_for("openai"), PrefixChecker()
    earlier = checker.check(_body(turns + 1, "other" if system else ""), rule).record
    check = checker.check(_body(turns, system), rule, [earlier])
    for value in (check, check.record, check.request, check.expectation):
        _assert_frozen_equal(value)
    if check.divergence is not None:
        _assert_frozen_equal(check.divergence)
    if check.forecast is not None:
        _assert_frozen_equal(check.forecast)
    assert PrefixRecord.from_dict(check.record.to_dict()) == check.record
    judged = verdict(100, 20, 200, Decimal("0.000002"), Decimal("0.0000002"))
    _assert_frozen_equal(judged)


@settings(deadline=None)  # a loaded box: no per-example time limit
@given(tokens=st.integers(0, 10**9))
def test_with_reported_tokens_is_replace(tokens: int) -> None:
    record = PrefixChecker().check(_body(2, "be brief"), rule_for("vllm")).record
    record.fingerprints  # noqa: B018 - the chain made, so there is a list to share
    made = with_reported_tokens(record, tokens)
    replaced = dataclasses.replace(record, reported_prompt_tokens=tokens)
    assert type(made) is PrefixRecord and made == replaced
    assert made._chain is record._chain is replaced._chain
    _assert_frozen_equal(made)


@settings(deadline=None)  # a loaded box: no per-example time limit
@given(size=st.integers(0, 300), data=st.data())
def test_common_prefix_finds_the_first_difference_anywhere(size: int, data: Any) -> None:
    digests = tuple(f"{i:032x}" for i in range(size))
    cut = data.draw(st.integers(0, size))
    other = digests[:cut] + tuple(f"{i:032x}" for i in range(10**6, 10**6 + size - cut))
    fields: dict[str, Any] = {
        "family": "openai",
        "model": "m",
        "canonical_digests": ("",) * size,
        "cumulative_tokens": tuple(range(1, size + 1)),
        "stable_count": size,
        "header_count": 0,
    }
    a = PrefixRecord(segment_names=digests, segment_digests=digests, **fields)
    b = PrefixRecord(segment_names=other, segment_digests=other, **fields)
    assert common_prefix(a, b) == cut


def _reference_record(request: Any, rule: Any) -> PrefixRecord:
    """The small record as the plain zip of its segments builds it."""
    segments = request.segments
    names, _, datas, digests, _, canonical, _ = zip(*segments, strict=True)
    return PrefixRecord(
        family=request.family,
        model=request.model,
        segment_names=names,
        segment_digests=tuple(map(bytes.hex, digests)),
        canonical_digests=tuple(map(bytes.hex, canonical)),
        cumulative_tokens=tuple(accumulate([(n + 3) >> 2 for n in map(len, datas)])),
        stable_count=request.stable_count,
        header_count=request.header_count,
        breakpoints=written_breakpoints(request, rule),
        settings={
            s.name: s.data.decode("utf-8", "replace")[:200]
            for s in segments[: request.header_count]
            if s.kind is SegmentKind.SETTING and s.data != b"null"
        },
    )


_EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.just([{"type": "function", "function": {"name": "f"}}]),
        "reasoning_effort": st.sampled_from(["low", "high"]),
        "service_tier": st.just("flex"),
        "response_format": st.just({"type": "json_object"}),
        "tool_choice": st.just("auto"),
    },
)


@settings(deadline=None)  # a loaded box: no per-example time limit
@given(
    turns=st.integers(0, 20),
    system=st.sampled_from(["", "be brief"]),
    extras=_EXTRAS,
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_a_small_record_is_the_zip_of_its_segments(
    turns: int, system: str, extras: dict[str, Any], family: str
) -> None:
    rule = rule_for(family)
    for _ in range(2):  # first and second sight of the header
        request = split_request({**_body(turns, system), **extras}, rule)
        made = build_record(request, rule)
        assert made == _reference_record(request, rule)
        assert made.settings == _reference_record(request, rule).settings
