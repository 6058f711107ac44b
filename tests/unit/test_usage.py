from __future__ import annotations

from gateway.usage import Usage, usage_from_anthropic, usage_from_openai


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


def test_garbage_counts_are_zero() -> None:
    assert usage_from_openai({"prompt_tokens": None, "completion_tokens": -3}) == Usage()
