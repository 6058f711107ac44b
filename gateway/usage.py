"""Token usage normalised to OpenAI's semantics, whatever the upstream reported.

OpenAI semantics: `prompt_tokens` is the whole input; cached reads and cache writes are
*subsets* of it. `completion_tokens` is the whole output; reasoning is a subset of it.
Anthropic reports cache reads and writes *beside* `input_tokens`, so they are added back
here, once, instead of in every consumer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one upstream call; every subset is included in its total."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens billed at the full input price."""
        writes = self.cache_write_tokens + self.cache_write_1h_tokens
        return max(self.prompt_tokens - self.cached_tokens - writes, 0)

    @property
    def answer_tokens(self) -> int:
        """Visible output tokens (output that is not reasoning)."""
        return max(self.completion_tokens - self.reasoning_tokens, 0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            estimated=self.estimated or other.estimated,
        )

    def to_openai(self) -> dict[str, Any]:
        """Render as an OpenAI `usage` object (cache writes kept as extra fields)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": {
                "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_write_tokens + self.cache_write_1h_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _details(usage: dict[str, Any], key: str) -> dict[str, Any]:
    value = usage.get(key)
    return value if isinstance(value, dict) else {}


def usage_from_openai(usage: dict[str, Any]) -> Usage:
    """Read an OpenAI-shaped usage object (OpenAI, vLLM, SGLang, litellm output)."""
    prompt = _details(usage, "prompt_tokens_details")
    completion = _details(usage, "completion_tokens_details")
    writes_1h = 0
    writes = _int(prompt.get("cache_write_tokens")) or _int(
        usage.get("cache_creation_input_tokens")
    )
    # The TTL split: Anthropic's `cache_creation`, or litellm's copy of it.
    creation = _details(usage, "cache_creation") or _details(prompt, "cache_creation_token_details")
    if creation:
        writes_1h = _int(creation.get("ephemeral_1h_input_tokens"))
        writes = (
            max(writes - writes_1h, 0)
            if writes
            else _int(creation.get("ephemeral_5m_input_tokens"))
        )
    cached = _int(prompt.get("cached_tokens")) or _int(usage.get("cache_read_input_tokens"))
    return Usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        cached_tokens=cached,
        cache_write_tokens=writes,
        cache_write_1h_tokens=writes_1h,
        completion_tokens=_int(usage.get("completion_tokens")),
        reasoning_tokens=_int(completion.get("reasoning_tokens")),
    )


def usage_from_anthropic(usage: dict[str, Any], reasoning_tokens: int = 0) -> Usage:
    """Read an Anthropic Messages usage object, where input excludes cache reads and writes."""
    read = _int(usage.get("cache_read_input_tokens"))
    creation = _details(usage, "cache_creation")
    if creation:
        writes = _int(creation.get("ephemeral_5m_input_tokens"))
        writes_1h = _int(creation.get("ephemeral_1h_input_tokens"))
    else:
        writes, writes_1h = _int(usage.get("cache_creation_input_tokens")), 0
    return Usage(
        prompt_tokens=_int(usage.get("input_tokens")) + read + writes + writes_1h,
        cached_tokens=read,
        cache_write_tokens=writes,
        cache_write_1h_tokens=writes_1h,
        completion_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=reasoning_tokens,
    )
