"""Token usage normalised to OpenAI's semantics, whatever the upstream reported.

OpenAI semantics: `prompt_tokens` is the whole input; cached reads and cache writes are
*subsets* of it. `completion_tokens` is the whole output; reasoning is a subset of it.
Anthropic reports cache reads and writes *beside* `input_tokens`, so they are added back
here, once, instead of in every consumer.

An upstream's numbers are not trusted blindly; what is billed obeys these rules:

* every count is a non-negative integer (an integral float is read as one); a string,
  a negative or a non-finite number counts 0;
* no count exceeds `MAX_TOKENS_PER_CALL` (larger ones are clamped to it);
* cache reads + cache writes <= prompt, reasoning <= completion (subsets are clamped to
  their totals, reads first, then 5-minute writes, then 1-hour writes).

A usage that needed any of this is `suspect`, and `reported` keeps the upstream's usage
object as it came (JSON, ASCII, at most `MAX_REPORTED_CHARS`) for an audit. Absent
fields and JSON nulls count 0 without suspicion: many servers omit the details.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from gateway.frozen import mutable_twin

MAX_TOKENS_PER_CALL = 100_000_000
"""The most tokens of one kind a single upstream call is billed for: 100M, some 50x the
largest context window on sale; a larger count is garbage, and an int64 column holds any
sum of such counts."""
MAX_REPORTED_CHARS = 2048


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
    suspect: bool = False  # the upstream's counts were clamped to be billable
    reported: str | None = None  # the upstream's usage object as sent, when suspect

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
            **{name: getattr(self, name) + getattr(other, name) for name in TOKEN_FIELDS},
            estimated=self.estimated or other.estimated,
            suspect=self.suspect or other.suspect,
            reported=self.reported or other.reported,
        )

    def token_counts(self) -> dict[str, Any]:
        """Return each token count by name (the ledger's token columns)."""
        return dict(zip(TOKEN_FIELDS, _TOKEN_COUNTS(self), strict=True))

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


TOKEN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Usage) if f.name.endswith("_tokens"))
"""The token counts, in column order; every other list of them derives from this one."""
_TOKEN_COUNTS = attrgetter(*TOKEN_FIELDS)
_PLAIN_USAGE = mutable_twin(Usage)  # `Usage(...)` on the usual reply's path, a store per field


class _Reader:
    """Reads the counts of one usage object, remembering whether any was unusable."""

    def __init__(self) -> None:
        self.suspect = False

    def __call__(self, value: Any) -> int:
        """Return `value` as a billable count (see the module docstring)."""
        if value is None:
            return 0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.suspect = True
            return 0
        if value > MAX_TOKENS_PER_CALL:
            self.suspect = True
            return MAX_TOKENS_PER_CALL
        return value

    def details(self, usage: dict[str, Any], key: str) -> dict[str, Any]:
        """Return a nested details object; anything but an object or null is suspect."""
        value = usage.get(key)
        if value is not None and not isinstance(value, dict):
            self.suspect = True
        return value if isinstance(value, dict) else {}


def _consistent(counts: dict[str, int]) -> dict[str, Any]:
    """Clamp each subset to what its total leaves, and every count to the bound."""
    fixed = {name: min(count, MAX_TOKENS_PER_CALL) for name, count in counts.items()}
    room = fixed["prompt_tokens"]
    for name in ("cached_tokens", "cache_write_tokens", "cache_write_1h_tokens"):
        fixed[name] = min(fixed[name], room)
        room -= fixed[name]
    fixed["reasoning_tokens"] = min(fixed["reasoning_tokens"], fixed["completion_tokens"])
    return fixed


def reported_text(raw: Any) -> str:
    """The upstream's usage object as JSON text (ASCII, never over `MAX_REPORTED_CHARS`)."""
    text = json.dumps(raw, ensure_ascii=True, default=repr)
    if len(text) <= MAX_REPORTED_CHARS:
        return text
    # Still valid JSON when cut: the head is quoted again, and quoting can double it.
    head = MAX_REPORTED_CHARS
    while head > 0:
        wrapped = json.dumps({"truncated": len(text), "head": text[:head]}, ensure_ascii=True)
        if len(wrapped) <= MAX_REPORTED_CHARS:
            return wrapped
        head = head * MAX_REPORTED_CHARS // len(wrapped) - 32  # shrink by the overshoot
    return json.dumps({"truncated": len(text)})


def _settle(raw: Any, reader: _Reader, counts: dict[str, int]) -> Usage:
    """Build the billable usage from the counts read, flagging it when anything was fixed."""
    fixed = _consistent(counts)
    if reader.suspect or fixed != counts:
        return Usage(**fixed, suspect=True, reported=reported_text(raw))
    return Usage(**fixed)


def usage_from_openai(usage: dict[str, Any]) -> Usage:
    """Read an OpenAI-shaped usage object (OpenAI, vLLM, SGLang, litellm output)."""
    plain = _plain_openai(usage)
    return plain if plain is not None else _read_openai(usage)


def _count_within(value: Any, limit: int) -> int | None:
    """`value` when it is a plain integer from 0 to `limit`, else None."""
    return value if type(value) is int and 0 <= value <= limit else None


def _plain_openai(usage: dict[str, Any]) -> Usage | None:
    """`_read_openai(usage)` for the usual object, else None: totals and the cached and
    reasoning details as plain in-range integers (or absent), no cache writes at all.

    What every server sends on every reply (vLLM's `prompt_tokens_details: null`,
    OpenAI's details objects), read without the reader's general case.
    """
    prompt = _count_within(usage.get("prompt_tokens"), MAX_TOKENS_PER_CALL)
    completion = _count_within(usage.get("completion_tokens"), MAX_TOKENS_PER_CALL)
    if prompt is None or completion is None:
        return None
    if (
        usage.get("cache_creation_input_tokens") is not None
        or usage.get("cache_creation") is not None
        or usage.get("cache_read_input_tokens") is not None
    ):
        return None
    cached: int | None = 0
    reasoning: int | None = 0
    details = usage.get("prompt_tokens_details")
    if details is not None:
        if type(details) is not dict or (
            details.get("cache_write_tokens") is not None
            or details.get("cache_creation_token_details") is not None
        ):
            return None
        given = details.get("cached_tokens")
        cached = 0 if given is None else _count_within(given, prompt)
    details = usage.get("completion_tokens_details")
    if details is not None:
        if type(details) is not dict:
            return None
        given = details.get("reasoning_tokens")
        reasoning = 0 if given is None else _count_within(given, completion)
    if cached is None or reasoning is None:
        return None  # a subset over its total, or not a count: the reader's case
    return _PLAIN_USAGE(
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
    )


def _read_openai(usage: dict[str, Any]) -> Usage:
    """`usage_from_openai`, every case: the reader's checks, clamps and suspicion."""
    count = _Reader()
    prompt = count.details(usage, "prompt_tokens_details")
    completion = count.details(usage, "completion_tokens_details")
    writes_1h = 0
    writes = count(prompt.get("cache_write_tokens")) or count(
        usage.get("cache_creation_input_tokens")
    )
    # The TTL split: Anthropic's `cache_creation`, or litellm's copy of it.
    creation = count.details(usage, "cache_creation") or count.details(
        prompt, "cache_creation_token_details"
    )
    if creation:
        writes_1h = count(creation.get("ephemeral_1h_input_tokens"))
        writes = (
            max(writes - writes_1h, 0)
            if writes
            else count(creation.get("ephemeral_5m_input_tokens"))
        )
    cached = count(prompt.get("cached_tokens")) or count(usage.get("cache_read_input_tokens"))
    counts = {
        "prompt_tokens": count(usage.get("prompt_tokens")),
        "cached_tokens": cached,
        "cache_write_tokens": writes,
        "cache_write_1h_tokens": writes_1h,
        "completion_tokens": count(usage.get("completion_tokens")),
        "reasoning_tokens": count(completion.get("reasoning_tokens")),
    }
    return _settle(usage, count, counts)


def usage_from_anthropic(usage: dict[str, Any], reasoning_tokens: int = 0) -> Usage:
    """Read an Anthropic Messages usage object, where input excludes cache reads and writes."""
    plain = _plain_anthropic(usage, reasoning_tokens)
    return plain if plain is not None else _read_anthropic(usage, reasoning_tokens)


def _count_or_zero(value: Any, limit: int) -> int | None:
    """`_count_within`, an absent count (None) read as 0."""
    return 0 if value is None else _count_within(value, limit)


def _plain_anthropic(usage: dict[str, Any], reasoning_tokens: int) -> Usage | None:
    """`_read_anthropic(usage, reasoning_tokens)` for the usual object, else None: every
    count a plain in-range integer (or absent), the TTL split (`cache_creation`) an object
    of such counts or absent, their sum and the reasoning within bounds: nothing to fix.

    What Anthropic sends on every reply and in every `message_start` / `message_delta`
    (merged), read without the reader's general case.
    """
    limit = MAX_TOKENS_PER_CALL
    given = _count_within(usage.get("input_tokens"), limit)
    output = _count_within(usage.get("output_tokens"), limit)
    read = _count_or_zero(usage.get("cache_read_input_tokens"), limit)
    creation = usage.get("cache_creation")
    writes_1h: int | None = 0
    if creation:  # the split, as the reader takes it: a non-empty object
        if type(creation) is not dict:
            return None
        writes = _count_or_zero(creation.get("ephemeral_5m_input_tokens"), limit)
        writes_1h = _count_or_zero(creation.get("ephemeral_1h_input_tokens"), limit)
    elif creation is None or type(creation) is dict:
        writes = _count_or_zero(usage.get("cache_creation_input_tokens"), limit)
    else:
        return None  # an empty list or string: suspect to the reader
    if given is None or output is None or read is None or writes is None or writes_1h is None:
        return None
    prompt = given + read + writes + writes_1h
    reasoning = _count_within(reasoning_tokens, output)
    if prompt > limit or reasoning is None:
        return None  # clamped by the reader
    return _PLAIN_USAGE(
        prompt_tokens=prompt,
        cached_tokens=read,
        cache_write_tokens=writes,
        cache_write_1h_tokens=writes_1h,
        completion_tokens=output,
        reasoning_tokens=reasoning,
    )


def _read_anthropic(usage: dict[str, Any], reasoning_tokens: int = 0) -> Usage:
    """`usage_from_anthropic`, every case: the reader's checks, clamps and suspicion."""
    count = _Reader()
    read = count(usage.get("cache_read_input_tokens"))
    creation = count.details(usage, "cache_creation")
    if creation:
        writes = count(creation.get("ephemeral_5m_input_tokens"))
        writes_1h = count(creation.get("ephemeral_1h_input_tokens"))
    else:
        writes, writes_1h = count(usage.get("cache_creation_input_tokens")), 0
    counts = {
        "prompt_tokens": count(usage.get("input_tokens")) + read + writes + writes_1h,
        "cached_tokens": read,
        "cache_write_tokens": writes,
        "cache_write_1h_tokens": writes_1h,
        "completion_tokens": count(usage.get("output_tokens")),
        "reasoning_tokens": count(reasoning_tokens),
    }
    return _settle(usage, count, counts)
