"""Property tests: whatever usage object an upstream sends, what is billed obeys the rules."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pipeline.identifiers import identifier_problem
from gateway.usage import MAX_REPORTED_CHARS, MAX_TOKENS_PER_CALL, usage_from_openai

FAST = settings(max_examples=400, deadline=None)

counts = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)
details = st.one_of(
    st.none(),
    st.integers(),
    st.fixed_dictionaries(
        {},
        optional={
            "cached_tokens": counts,
            "cache_write_tokens": counts,
            "reasoning_tokens": counts,
            "cache_creation_token_details": st.dictionaries(
                st.sampled_from(["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"]),
                counts,
            ),
        },
    ),
)
usage_objects = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": counts,
        "completion_tokens": counts,
        "total_tokens": counts,
        "prompt_tokens_details": details,
        "completion_tokens_details": details,
        "cache_read_input_tokens": counts,
        "cache_creation_input_tokens": counts,
        "note": st.one_of(st.text(max_size=3000), st.text('"\\\x00\udcff', max_size=3000)),
    },
)


@FAST
@given(usage_objects)
def test_billed_usage_obeys_openai_semantics(raw: dict[str, Any]) -> None:
    usage = usage_from_openai(raw)
    billed = usage.token_counts()
    assert all(type(n) is int and 0 <= n <= MAX_TOKENS_PER_CALL for n in billed.values())
    writes = usage.cache_write_tokens + usage.cache_write_1h_tokens
    assert usage.cached_tokens + writes <= usage.prompt_tokens
    assert usage.reasoning_tokens <= usage.completion_tokens
    if usage.suspect:
        assert usage.reported is not None and usage.reported.isascii()
        assert len(usage.reported) <= MAX_REPORTED_CHARS
        json.loads(usage.reported)  # always valid JSON, even when capped
    else:
        assert usage.reported is None


@FAST
@given(st.text(max_size=40), st.integers(min_value=1, max_value=30))
def test_an_accepted_identifier_is_printable_and_short(value: str, limit: int) -> None:
    if identifier_problem(value, limit) is None:
        assert 0 < len(value) <= limit
        assert all(c.isprintable() or c in "\u200c\u200d" for c in value)
        assert "\x00" not in value and "\n" not in value and "\r" not in value
        value.encode("utf-8")  # no lone surrogate: every database can store it
