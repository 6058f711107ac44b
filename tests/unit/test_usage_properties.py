"""Property tests: whatever usage object an upstream sends, what is billed obeys the rules."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pipeline.identifiers import identifier_problem
from gateway.usage import (
    MAX_REPORTED_CHARS,
    MAX_TOKENS_PER_CALL,
    Usage,
    _plain_anthropic,
    _plain_openai,
    _read_anthropic,
    _read_openai,
    usage_from_openai,
)

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


small_counts = st.one_of(st.none(), st.integers(min_value=-2, max_value=40), st.just(True))
plain_details = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "cached_tokens": small_counts,
            "reasoning_tokens": small_counts,
            "audio_tokens": small_counts,
        },
    ),
)
plain_usage_objects = st.fixed_dictionaries(
    {
        "prompt_tokens": st.one_of(st.integers(min_value=0, max_value=40), counts),
        "completion_tokens": st.one_of(st.integers(min_value=0, max_value=40), counts),
    },
    optional={
        "total_tokens": counts,
        "prompt_tokens_details": st.one_of(plain_details, details),
        "completion_tokens_details": st.one_of(plain_details, details),
        "cache_read_input_tokens": st.one_of(st.none(), counts),
    },
)


@FAST
@given(st.one_of(plain_usage_objects, usage_objects))
def test_the_usual_usage_object_is_read_as_the_general_reader_reads_it(
    raw: dict[str, Any],
) -> None:
    plain = _plain_openai(raw)
    if plain is not None:  # the short path answers only where it gives the reader's usage
        assert plain == _read_openai(raw)


def test_the_usual_usage_objects_take_the_short_path() -> None:
    vllm = {
        "prompt_tokens": 12,
        "total_tokens": 21,
        "completion_tokens": 9,
        "prompt_tokens_details": None,
    }
    assert _plain_openai(vllm) == Usage(prompt_tokens=12, completion_tokens=9)
    openai = {
        "prompt_tokens": 30,
        "completion_tokens": 20,
        "total_tokens": 50,
        "prompt_tokens_details": {"cached_tokens": 10, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 5, "audio_tokens": 0},
    }
    assert _plain_openai(openai) == Usage(
        prompt_tokens=30, cached_tokens=10, completion_tokens=20, reasoning_tokens=5
    )
    assert _plain_openai({**openai, "prompt_tokens": 5}) is None  # cached over prompt: clamped
    assert _plain_openai({**openai, "cache_read_input_tokens": 3}) is None


plain_anthropic_counts = st.one_of(st.integers(min_value=0, max_value=40), st.none(), counts)
anthropic_usage_objects = st.fixed_dictionaries(
    {
        "input_tokens": st.one_of(st.integers(min_value=0, max_value=40), counts),
        "output_tokens": st.one_of(st.integers(min_value=0, max_value=40), counts),
    },
    optional={
        "cache_read_input_tokens": plain_anthropic_counts,
        "cache_creation_input_tokens": plain_anthropic_counts,
        "cache_creation": st.one_of(
            st.none(),
            counts,
            st.fixed_dictionaries(
                {},
                optional={
                    "ephemeral_5m_input_tokens": plain_anthropic_counts,
                    "ephemeral_1h_input_tokens": plain_anthropic_counts,
                },
            ),
        ),
        "service_tier": st.sampled_from(["standard", "priority", "batch"]),
    },
)


@FAST
@given(anthropic_usage_objects, st.one_of(st.integers(min_value=0, max_value=50), counts))
def test_the_usual_anthropic_usage_is_read_as_the_general_reader_reads_it(
    raw: dict[str, Any], reasoning: Any
) -> None:
    plain = _plain_anthropic(raw, reasoning)
    if plain is not None:  # the short path answers only where it gives the reader's usage
        assert plain == _read_anthropic(raw, reasoning)
        assert type(plain) is Usage and not plain.suspect


def test_the_usual_anthropic_usage_objects_take_the_short_path() -> None:
    reply = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "cache_creation": {"ephemeral_5m_input_tokens": 60, "ephemeral_1h_input_tokens": 40},
        "output_tokens": 30,
        "service_tier": "standard",
    }
    assert _plain_anthropic(reply, 10) == Usage(
        prompt_tokens=2112,
        cached_tokens=2000,
        cache_write_tokens=60,
        cache_write_1h_tokens=40,
        completion_tokens=30,
        reasoning_tokens=10,
    )
    older = {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 5}
    assert _plain_anthropic(older, 0) == Usage(
        prompt_tokens=17, cache_write_tokens=5, completion_tokens=3
    )
    assert _plain_anthropic({**older, "output_tokens": 2.0}, 0) is None  # a float: the reader's
    assert _plain_anthropic(older, 4) is None  # reasoning over output: clamped
    assert _plain_anthropic({**older, "cache_creation": [1]}, 0) is None  # suspect
