"""Deterministic output made of single-token words."""

from __future__ import annotations

from gateway import tokens
from gateway.sim.generator import (
    STARTERS,
    WORDS,
    plan_output,
    rng_for,
    scaled_length,
    signature_for,
)


def test_every_word_is_one_token() -> None:
    assert all(tokens.count_tokens(word) == 1 for word in STARTERS + WORDS)


def test_joined_text_keeps_its_token_count() -> None:
    plan = plan_output(rng_for(1, "prompt"), 30, 50, None)
    assert tokens.count_tokens(plan.reasoning_text) == 30
    assert tokens.count_tokens(plan.content_text) == 50
    assert plan.completion_tokens == 80


def test_same_seed_and_prompt_same_output() -> None:
    first = plan_output(rng_for(7, "hello"), 10, 20, None)
    assert first == plan_output(rng_for(7, "hello"), 10, 20, None)
    assert first != plan_output(rng_for(8, "hello"), 10, 20, None)
    assert first != plan_output(rng_for(7, "hello!"), 10, 20, None)


def test_max_tokens_cuts_reasoning_first() -> None:
    plan = plan_output(rng_for(0, "p"), 10, 20, 4)
    assert (plan.reasoning_tokens, len(plan.content), plan.finish_reason) == (4, 0, "length")
    plan = plan_output(rng_for(0, "p"), 10, 20, 15)
    assert (plan.reasoning_tokens, len(plan.content), plan.finish_reason) == (10, 5, "length")
    assert plan_output(rng_for(0, "p"), 10, 20, 30).finish_reason == "stop"


def test_effort_scales_reasoning() -> None:
    lengths = [scaled_length(40, e) for e in ("none", "minimal", "low", "medium", "high", "max")]
    assert lengths == [0, 10, 20, 40, 80, 160]
    assert scaled_length(40, None) == 40


def test_continuation_starts_mid_sentence() -> None:
    plan = plan_output(rng_for(0, "p"), 0, 5, None, continuing=True)
    assert plan.content[0].startswith(" ")


def test_signature_is_stable() -> None:
    assert signature_for("abc") == signature_for("abc") != signature_for("abd")
