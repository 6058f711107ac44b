"""An agent step's record columns in one native pass (`record_columns_like`) are the maps'.

`build_record` given `like` (the previous step's record and how many message segments
this step repeats of it) takes those segments' names and hex digests from that record; the
native pass does it, the running token sums over every segment included, in one loop.
Its record must equal the Python maps' and the whole cut's, whatever the task sends next.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import locate, record, rule_for
from gateway.prefix.checker import PrefixChecker
from tests.unit.prefix.test_prefix_reuse import MESSAGE

LIKE = locate.native_step("record_columns_like")
needs_native = pytest.mark.skipif(LIKE is None, reason="_locate not built")


def _records(bodies: list[list[dict[str, Any]]], family: str) -> list[Any]:
    """Each step's record, checked as a task's steps are (reusing the previous one's)."""
    rule = rule_for(family)
    checker = PrefixChecker()
    checker.reuse.min_bytes = 0
    records = []
    for messages in bodies:
        raw = orjson.dumps({"model": "m", "messages": messages})
        records.append(checker.check(orjson.loads(raw), rule, raw=raw, reuse_key="task:t").record)
    return records


@needs_native
@settings(max_examples=120, deadline=None)
@given(
    first=st.lists(MESSAGE, min_size=1, max_size=70),
    steps=st.lists(st.tuples(st.integers(0, 70), st.lists(MESSAGE, max_size=3)), max_size=4),
    system=st.integers(0, 2),
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_a_series_of_steps_records_as_the_python_maps(
    first: list[dict[str, Any]],
    steps: list[tuple[int, list[dict[str, Any]]]],
    system: int,
    family: str,
) -> None:
    lead = [{"role": "system", "content": f"s{i}"} for i in range(system)]
    messages = lead + list(first)
    bodies = [messages]
    for keep, added in steps:
        messages = messages[:keep] + added
        bodies.append(messages)
    native = _records(bodies, family)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(record, "_RECORD_COLUMNS_LIKE", None)
        mapped = _records(bodies, family)
    rule = rule_for(family)
    for got, maps, messages in zip(native, mapped, bodies, strict=True):
        whole = PrefixChecker().check({"model": "m", "messages": messages}, rule).record
        assert got == maps == whole
        assert [type(n) for n in got.cumulative_tokens] == [int] * len(got.cumulative_tokens)
        assert got.fingerprints == whole.fingerprints


@needs_native
def test_an_agent_step_takes_the_native_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    history = [{"role": "system", "content": "agent"}]
    history += [{"role": "user", "content": f"turn {i}: " + "x = 1\n" * 40} for i in range(80)]
    calls: list[tuple[int, int]] = []
    assert LIKE is not None

    def spy(segments: Any, names: Any, digests: Any, canonical: Any, start: int, stop: int) -> Any:
        calls.append((start, stop))
        return LIKE(segments, names, digests, canonical, start, stop)

    monkeypatch.setattr(record, "_RECORD_COLUMNS_LIKE", spy)
    first, second = _records([history, [*history, {"role": "user", "content": "next"}]], "openai")
    head = second.header_count
    assert calls == [(head, head + 80)]  # the 80 turns repeated (the system is a header)
    # taken from the previous record, not made again
    assert second.segment_digests[head + 5] is first.segment_digests[head + 5]
    assert second.segment_names[head + 79] is first.segment_names[head + 79]


@needs_native
def test_record_columns_like_refuses_what_it_cannot_take() -> None:
    assert LIKE is not None
    segments = [("a", 0, b"abcde", b"\x01", 0, b""), ("b", 0, b"xy", b"\x02", 0, b"\x03")]
    earlier = (("A", "B"), ("aa", "bb"), ("", "cc"))
    assert LIKE(segments, *earlier, 1, 2) == (("a", "B"), ("01", "bb"), ("", "cc"), (2, 3))
    assert LIKE(segments, *earlier, 0, 0) == LIKE(segments, (), (), (), 0, 0)
    assert LIKE(segments, *earlier, 1, 3) is None  # past the segments
    assert LIKE(segments, ("A",), ("aa",), ("",), 0, 2) is None  # past the earlier columns
    assert LIKE(segments, *earlier, 2, 1) is None
    assert LIKE(segments, ("A", 7), ("aa", "bb"), ("", "cc"), 0, 2) is None  # not a str
    assert LIKE([("a", 0, "text", b"\x01", 0, b"")], ("A",), ("a",), ("",), 0, 1) is None
    with pytest.raises(TypeError):
        LIKE(segments, ["A", "B"], ("aa", "bb"), ("", "cc"), 0, 2)
