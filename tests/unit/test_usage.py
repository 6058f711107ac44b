from __future__ import annotations

import json

import pytest

from gateway.usage import (
    MAX_REPORTED_CHARS,
    MAX_TOKENS_PER_CALL,
    Usage,
    usage_from_anthropic,
    usage_from_openai,
)


def test_openai_usage_with_cached_and_reasoning() -> None:
    usage = usage_from_openai(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 768},
            "completion_tokens_details": {"reasoning_tokens": 200},
        }
    )
    assert usage == Usage(
        prompt_tokens=1000, cached_tokens=768, completion_tokens=300, reasoning_tokens=200
    )
    assert usage.uncached_input_tokens == 232
    assert usage.answer_tokens == 100


def test_anthropic_usage_adds_cache_tokens_back_into_prompt_tokens() -> None:
    usage = usage_from_anthropic(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 50,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30},
            "output_tokens": 7,
        },
        reasoning_tokens=4,
    )
    assert usage.prompt_tokens == 160
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        100,
        20,
        30,
    )
    assert usage.uncached_input_tokens == 10
    assert usage.completion_tokens == 7 and usage.reasoning_tokens == 4


def test_litellm_normalised_anthropic_usage_is_not_double_counted() -> None:
    # litellm already folds cache reads and writes into prompt_tokens.
    usage = usage_from_openai(
        {
            "prompt_tokens": 130,
            "completion_tokens": 7,
            "prompt_tokens_details": {
                "cached_tokens": 100,
                "cache_write_tokens": 20,
                "cache_creation_token_details": {
                    "ephemeral_5m_input_tokens": 5,
                    "ephemeral_1h_input_tokens": 15,
                },
            },
            "cache_creation_input_tokens": 20,
            "cache_read_input_tokens": 100,
        }
    )
    assert usage.prompt_tokens == 130
    assert usage.cached_tokens == 100
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (5, 15)
    assert usage.uncached_input_tokens == 10


def test_addition_and_openai_rendering() -> None:
    total = Usage(prompt_tokens=10, completion_tokens=5) + Usage(
        prompt_tokens=3, completion_tokens=2, reasoning_tokens=1, estimated=True
    )
    assert total.total_tokens == 20 and total.estimated
    rendered = total.to_openai()
    assert rendered["completion_tokens_details"] == {"reasoning_tokens": 1}
    assert rendered["prompt_tokens"] == 13


def test_absent_and_null_counts_are_zero_and_not_suspect() -> None:
    usage = usage_from_openai(
        {"prompt_tokens": None, "prompt_tokens_details": None, "completion_tokens_details": None}
    )
    assert usage == Usage()


@pytest.mark.parametrize("garbage", [-3, "12", True, 1.5, float("inf"), [1], {"n": 1}], ids=repr)
def test_garbage_counts_are_zero_and_suspect(garbage: object) -> None:
    raw = {"prompt_tokens": 100, "completion_tokens": garbage}
    usage = usage_from_openai(raw)
    assert usage.token_counts() == {**Usage().token_counts(), "prompt_tokens": 100}
    assert usage.suspect
    assert usage.reported is not None and json.loads(usage.reported)["prompt_tokens"] == 100


def test_an_integral_float_is_an_integer() -> None:
    assert usage_from_openai({"prompt_tokens": 12.0}) == Usage(prompt_tokens=12)


def test_subsets_are_clamped_to_their_totals_and_the_original_is_kept() -> None:
    raw = {
        "prompt_tokens": 100,
        "completion_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": 80, "cache_write_tokens": 50},
        "completion_tokens_details": {"reasoning_tokens": 1_000_000_000},
    }
    usage = usage_from_openai(raw)
    assert usage.token_counts() == {
        "prompt_tokens": 100,
        "cached_tokens": 80,
        "cache_write_tokens": 20,
        "cache_write_1h_tokens": 0,
        "completion_tokens": 0,
        "reasoning_tokens": 0,
    }
    assert usage.suspect and usage.reported is not None
    assert json.loads(usage.reported) == raw
    assert (usage.uncached_input_tokens, usage.answer_tokens) == (0, 0)


def test_counts_are_bounded_per_call() -> None:
    usage = usage_from_openai({"prompt_tokens": 3_000_000_000, "completion_tokens": 10**19})
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        MAX_TOKENS_PER_CALL,
        MAX_TOKENS_PER_CALL,
    )
    assert usage.suspect


def test_anthropic_sum_is_bounded_and_subsets_fit() -> None:
    big = MAX_TOKENS_PER_CALL
    usage = usage_from_anthropic(
        {"input_tokens": big, "cache_read_input_tokens": big, "output_tokens": 5},
        reasoning_tokens=9,
    )
    assert usage.prompt_tokens == big and usage.cached_tokens == big
    assert usage.reasoning_tokens == 5 and usage.suspect


def test_reported_usage_is_ascii_and_capped() -> None:
    raw = {"prompt_tokens": -1, "note": "\x00\udcff" + "x" * 10_000}
    usage = usage_from_openai(raw)
    assert usage.reported is not None
    assert len(usage.reported) <= MAX_REPORTED_CHARS and usage.reported.isascii()
    assert json.loads(usage.reported)["truncated"] > MAX_REPORTED_CHARS


def test_a_capped_report_of_quotes_and_backslashes_is_still_json() -> None:
    usage = usage_from_openai({"prompt_tokens": -1, "note": '"\\' * 3000})
    assert usage.reported is not None and len(usage.reported) <= MAX_REPORTED_CHARS
    report = json.loads(usage.reported)  # valid JSON although cut
    assert report["truncated"] > MAX_REPORTED_CHARS
    assert report["head"].startswith('{"prompt_tokens": -1, "note": "\\"\\\\')


def test_a_suspect_part_makes_the_sum_suspect() -> None:
    flagged = usage_from_openai({"prompt_tokens": -1})
    total = Usage(prompt_tokens=3) + flagged
    assert total.suspect and total.reported == flagged.reported
