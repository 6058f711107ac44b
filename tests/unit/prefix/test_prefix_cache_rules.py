"""One table of provider cache rules: minimums, granularity, breakpoints, invalidation."""

from __future__ import annotations

import pytest

from gateway.prefix import CacheMode, family_of, rule_for, rule_from_model_info
from gateway.prefix.cache_rules import expect, invalidated_by, round_cached


@pytest.mark.parametrize(
    ("name", "family"),
    [("OpenAI", "openai"), ("azure", "openai"), ("anthropic", "anthropic"), ("sglang", "vllm")],
)
def test_family_aliases(name: str, family: str) -> None:
    assert family_of(name) == family


def test_unknown_family_says_which_are_known() -> None:
    with pytest.raises(ValueError, match="use one of"):
        family_of("gemini")


@pytest.mark.parametrize(
    ("boundary", "prompt", "cached"),
    [
        (1023, 5000, 0),
        (1024, 5000, 1024),
        (1151, 5000, 1024),
        (1152, 5000, 1152),
        (3000, 3000, 2944),
    ],
)
def test_openai_reads_from_1024_tokens_in_128_token_steps(
    boundary: int, prompt: int, cached: int
) -> None:
    assert round_cached(rule_for("openai"), boundary, prompt) == cached


def test_openai_prompt_below_minimum_is_reported() -> None:
    expectation = expect(rule_for("openai"), [300, 900], 2)
    assert expectation.cached_tokens == 0
    assert expectation.below_minimum


def test_openai_shared_prefix_below_minimum_is_reported() -> None:
    expectation = expect(rule_for("openai"), [600, 5000], 1)
    assert expectation.cached_tokens == 0
    assert expectation.shared_below_minimum and not expectation.below_minimum


def test_vllm_reuses_whole_blocks_but_never_the_last_token() -> None:
    rule = rule_for("vllm")
    assert rule.mode is CacheMode.BLOCK and rule.min_tokens == 16
    assert round_cached(rule, 100, 500) == 96
    assert round_cached(rule, 64, 64) == 48
    assert round_cached(rule, 15, 500) == 0


def test_anthropic_reads_only_at_boundaries_written_earlier() -> None:
    rule = rule_for("anthropic")
    cumulative = [100, 1500, 3000, 3200]
    # The earlier request wrote a breakpoint after segment 1; this one marks segment 3.
    hit = expect(rule, cumulative, matched=3, own_breakpoints=[3], written_before=[1])
    assert (hit.cached_tokens, hit.write_tokens) == (1500, 1700)
    # Nothing written before: no read, the whole prefix up to the breakpoint is written.
    cold = expect(rule, cumulative, matched=3, own_breakpoints=[3])
    assert (cold.cached_tokens, cold.write_tokens) == (0, 3200)


def test_anthropic_minimum_comes_from_the_model_map() -> None:
    rule = rule_from_model_info("anthropic", {"prompt_cache_min_tokens": 4096})
    assert rule.min_tokens == 4096
    expectation = expect(rule, [100, 1500, 3000], 3, [2], [1])
    assert expectation.cached_tokens == 0
    assert expectation.below_minimum
    assert rule_for("anthropic").min_tokens == 1024


def test_anthropic_looks_back_at_most_twenty_blocks() -> None:
    rule = rule_for("anthropic")
    cumulative = [2000 + 10 * i for i in range(40)]
    near = expect(rule, cumulative, 40, own_breakpoints=[30], written_before=[10])
    far = expect(rule, cumulative, 40, own_breakpoints=[31], written_before=[10])
    assert near.cached_tokens == cumulative[10]
    assert far.cached_tokens == 0


def test_anthropic_needs_a_breakpoint_to_read() -> None:
    expectation = expect(rule_for("anthropic"), [2000, 4000], 2, own_breakpoints=[])
    assert expectation.cached_tokens == 0


def test_openai_breakpoint_mode_from_model_info() -> None:
    rule = rule_from_model_info("openai", {"supports_prompt_cache_breakpoint": True})
    assert rule.mode is CacheMode.BREAKPOINT and rule.lookback_segments is None
    cumulative = [500, 1500, 2500, 2600]
    expectation = expect(rule, cumulative, 3, own_breakpoints=[3], written_before=[0, 2])
    assert expectation.cached_tokens == 2500
    assert expectation.write_tokens == 100


@pytest.mark.parametrize(
    ("part", "invalidated"),
    [
        ("tools", ("tools", "speed", "system", "tool_choice", "effort", "messages")),
        ("speed", ("speed", "system", "tool_choice", "effort", "messages")),
        ("effort", ("effort", "messages")),
        ("tool_choice", ("tool_choice", "effort", "messages")),
        ("messages", ("messages",)),
    ],
)
def test_anthropic_invalidation_table(part: str, invalidated: tuple[str, ...]) -> None:
    assert invalidated_by(rule_for("anthropic"), part) == invalidated


def test_openai_effort_invalidates_everything_rendered_after_it() -> None:
    assert invalidated_by(rule_for("openai"), "effort")[:2] == ("effort", "system")


def test_scaled_expectation_uses_the_real_prompt_size() -> None:
    expectation = expect(rule_for("openai"), [1000, 2000], 1)
    assert expectation.cached_tokens == 0  # 1000 estimated tokens: under the minimum
    assert expectation.scaled(4000) == 1920  # really 2000 tokens shared: 1024 + 7 x 128
