"""How each provider family renders a prompt and what its prompt cache can read.

This is the one table of provider rules; every other module asks it. For each family:

- the order in which the request's header parts are rendered ahead of the messages
  (a change invalidates everything rendered after it, so the order *is* the
  invalidation table: Anthropic renders tools, then speed, then system, then
  tool_choice and thinking/effort, then messages);
- how a prefix becomes cached tokens: OpenAI's automatic cache reads the longest
  repeated prefix from 1,024 tokens in 128-token steps; OpenAI's breakpoint caching
  (gpt-5.6 and later) and Anthropic read only at boundaries an earlier request wrote,
  unrounded, and bill cache writes; vLLM and SGLang reuse whole 16-token blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal

from gateway.frozen import mutable_twin

Family = Literal["openai", "anthropic", "vllm"]

_FAMILY_ALIASES: dict[str, Family] = {
    "openai": "openai",
    "azure": "openai",
    "azure_ai": "openai",
    "anthropic": "anthropic",
    "claude": "anthropic",
    "vllm": "vllm",
    "hosted_vllm": "vllm",
    "sglang": "vllm",
}


class CacheMode(StrEnum):
    """How a provider turns a repeated prefix into cached tokens."""

    PREFIX = "prefix"
    BREAKPOINT = "breakpoint"
    BLOCK = "block"


@dataclass(frozen=True, slots=True)
class CacheRule:
    """One provider family's prompt-cache behaviour."""

    family: Family
    mode: CacheMode
    min_tokens: int
    increment: int
    max_breakpoints: int
    lookback_segments: int | None
    header_order: tuple[str, ...]


# Header parts in render order; the messages always follow. Parts a family does not render
# (OpenAI's service_tier, vLLM's speed) are left out, so changing them breaks nothing here.
# OpenAI follows its published harmony format: effort in the first system message, then the
# developer instructions, then tools and response formats.
_ORDER: dict[Family, tuple[str, ...]] = {
    "openai": ("effort", "system", "tools", "tool_choice", "response_format"),
    "anthropic": ("tools", "speed", "system", "tool_choice", "effort"),
    # Templates may render chat_template_kwargs / reasoning_effort anywhere (gpt-oss puts the
    # effort in the first system message), so vLLM assumes the worst: first.
    "vllm": ("effort", "system", "tools", "tool_choice"),
}

OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128
ANTHROPIC_DEFAULT_MIN_TOKENS = 1024
ANTHROPIC_LOOKBACK_BLOCKS = 20
VLLM_BLOCK_SIZE = 16
MAX_BREAKPOINTS = 4


def family_of(name: str) -> Family:
    """Return the cache family for a family or provider name (`sglang` counts as vLLM)."""
    family = _FAMILY_ALIASES.get(name.strip().lower())
    if family is None:
        known = ", ".join(sorted(_FAMILY_ALIASES))
        raise ValueError(f"unknown prompt-cache family {name!r}; use one of: {known}")
    return family


def family_for_model(model: str) -> Family:
    """Guess the family from a model name when nothing better is known (lint files)."""
    return "anthropic" if "claude" in model.lower() else "openai"


@lru_cache(maxsize=64)  # a few families and minimums; the rule is frozen, so it is shared
def rule_for(
    family: str,
    *,
    min_tokens: int | None = None,
    breakpoints: bool = False,
    block_size: int = VLLM_BLOCK_SIZE,
) -> CacheRule:
    """Return the rule for a family; `breakpoints` selects OpenAI's breakpoint caching."""
    fam = family_of(family)
    order = _ORDER[fam]
    if fam == "anthropic":
        minimum = min_tokens or ANTHROPIC_DEFAULT_MIN_TOKENS
        return CacheRule(
            fam, CacheMode.BREAKPOINT, minimum, 1, MAX_BREAKPOINTS, ANTHROPIC_LOOKBACK_BLOCKS, order
        )
    if fam == "vllm":
        return CacheRule(fam, CacheMode.BLOCK, block_size, block_size, 0, None, order)
    minimum = min_tokens or OPENAI_MIN_TOKENS
    if breakpoints:
        # One implicit breakpoint plus explicit ones, four written per request, no lookback limit.
        return CacheRule(fam, CacheMode.BREAKPOINT, minimum, 1, MAX_BREAKPOINTS, None, order)
    return CacheRule(fam, CacheMode.PREFIX, minimum, OPENAI_INCREMENT, 0, None, order)


def rule_from_model_info(family: str, info: Mapping[str, Any]) -> CacheRule:
    """Build the rule from a litellm model-map entry (`prompt_cache_min_tokens` and friends)."""
    raw_min = info.get("prompt_cache_min_tokens")
    min_tokens = int(raw_min) if isinstance(raw_min, int | float) and raw_min > 0 else None
    breakpoints = bool(info.get("supports_prompt_cache_breakpoint"))
    return rule_for(family, min_tokens=min_tokens, breakpoints=breakpoints)


def invalidated_by(rule: CacheRule, part: str) -> tuple[str, ...]:
    """Return the header parts (plus "messages") that a change in `part` invalidates."""
    order = rule.header_order
    if part not in order:
        return ("messages",)
    return (*order[order.index(part) :], "messages")


@dataclass(frozen=True, slots=True)
class CacheExpectation:
    """What the provider should read from (and write to) its cache for one request.

    Token numbers are estimates (see `record.estimate_tokens`); `scaled` re-applies the
    rule once the provider has reported the real prompt size. `below_minimum`: nothing of
    this prompt can be cached (it, or its last breakpoint, is under the minimum);
    `shared_below_minimum`: a prefix is shared with history but too short to be read.
    """

    rule: CacheRule
    prompt_tokens: int
    matched_segments: int
    matched_tokens: int
    read_tokens: int
    cached_tokens: int
    write_tokens: int
    below_minimum: bool
    shared_below_minimum: bool = False

    def scaled(self, prompt_tokens: int) -> int:
        """Return the expected cached tokens for the real prompt size `prompt_tokens`."""
        if self.prompt_tokens <= 0 or self.read_tokens <= 0:
            return 0
        ratio = prompt_tokens / self.prompt_tokens
        return round_cached(self.rule, int(self.read_tokens * ratio), prompt_tokens)


_EXPECTATION = mutable_twin(CacheExpectation)  # a store per field (`gateway.frozen`)


def round_cached(rule: CacheRule, boundary: int, prompt_tokens: int) -> int:
    """Apply the family's minimum and granularity to a readable prefix of `boundary` tokens."""
    if boundary < rule.min_tokens or prompt_tokens < rule.min_tokens:
        return 0
    if rule.mode is CacheMode.PREFIX:
        steps = (boundary - rule.min_tokens) // rule.increment
        return rule.min_tokens + steps * rule.increment
    if rule.mode is CacheMode.BLOCK:
        # vLLM always recomputes the last prompt token, so a whole-prompt match stops short.
        readable = min(boundary, prompt_tokens - 1)
        return readable // rule.increment * rule.increment
    return boundary


def expect(
    rule: CacheRule,
    cumulative_tokens: Sequence[int],
    matched: int,
    own_breakpoints: Sequence[int] = (),
    written_before: Iterable[int] = (),
) -> CacheExpectation:
    """Return the expected cache read and write for a prompt matching `matched` segments.

    `cumulative_tokens[i]` is the estimated size of segments 0..i; breakpoints are segment
    indices whose end is a cache boundary (this request's, and those earlier requests wrote
    that this request repeats).
    """
    total = cumulative_tokens[-1] if cumulative_tokens else 0
    matched_tokens = cumulative_tokens[matched - 1] if matched > 0 else 0
    if rule.mode is not CacheMode.BREAKPOINT:
        # The longest repeated prefix is read, whatever the client marked.
        cached = round_cached(rule, matched_tokens, total)
        shared_below = 0 < matched_tokens < rule.min_tokens
        below = total < rule.min_tokens
        read = matched_tokens
        return _EXPECTATION(
            rule, total, matched, matched_tokens, read, cached, 0, below, shared_below
        )
    read_at = _readable_breakpoint(rule, matched, own_breakpoints, written_before)
    read = cumulative_tokens[read_at] if read_at is not None else 0
    cached = round_cached(rule, read, total)
    last_own = max(own_breakpoints, default=None)
    end = cumulative_tokens[last_own] if last_own is not None else 0
    write = end - cached if end >= rule.min_tokens and end > cached else 0
    below = total < rule.min_tokens or (last_own is not None and end < rule.min_tokens)
    shared_below = read_at is not None and read < rule.min_tokens
    return _EXPECTATION(
        rule, total, matched, matched_tokens, read, cached, write, below, shared_below
    )


def _readable_breakpoint(
    rule: CacheRule, matched: int, own: Sequence[int], written: Iterable[int]
) -> int | None:
    """Return the latest earlier-written boundary this request can read, if any."""
    best: int | None = None
    for position in written:
        if position >= matched or (best is not None and position <= best):
            continue
        # A read happens only at or behind one of this request's own breakpoints.
        if any(_within_lookback(rule, position, mine) for mine in own):
            best = position
    return best


def _within_lookback(rule: CacheRule, position: int, breakpoint_at: int) -> bool:
    if breakpoint_at < position:
        return False
    return rule.lookback_segments is None or breakpoint_at - position <= rule.lookback_segments
