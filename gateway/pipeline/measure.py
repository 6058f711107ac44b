"""Stage 6: what the upstream actually did, read from its reply as it passes through.

Upstream reasoning arrives as `reasoning` (current vLLM) or `reasoning_content` (SGLang,
older vLLM); both count as thinking. The first answer token is the first content or
tool-call delta, which is what a user waits for when a model thinks first.

Token times are observed on streams only. A whole reply arrives at once: the moment its
first token was decoded is not seen, so it has no time to first token, and no decode
speed; its whole duration is measured on its own (`Timings.finished`).

The meter never raises on what an upstream sent: a field of an unexpected type is read
as absent (the relay has already refused replies whose shape a client cannot use).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.usage import Usage, usage_from_openai

REASONING_FIELDS = ("reasoning", "reasoning_content")


def reasoning_text(message: dict[str, Any]) -> str:
    """The reasoning a message or delta carries, under either field name."""
    if not isinstance(message, dict):
        return ""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


@dataclass(slots=True)
class Meter:
    """Observes chunks (or one whole reply) and keeps what pricing and metrics need."""

    clock: Callable[[], float] = time.perf_counter
    first_token: float | None = None
    first_answer_token: float | None = None
    last_token: float | None = None
    reasoning_parts: list[str] = field(default_factory=list)
    answer_parts: list[str] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    service_tier: str | None = None
    speed: str | None = None
    chunks: int = 0
    # What the tier was settled from when the usage chunk was priced (`finish.price_now`):
    # the attempt's end settles it again only if that changed.
    tier_read: tuple[Any, ...] | None = None

    def observe_chunk(self, chunk: dict[str, Any]) -> None:
        """Account for one streamed `chat.completion.chunk`."""
        self.chunks += 1
        now = self.clock()
        if "usage" in chunk or "service_tier" in chunk:  # else nothing for `_observe_meta`
            self._observe_meta(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:  # one per chunk, each chunk of a stream: no list built
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            self._observe_delta(delta if isinstance(delta, dict) else {}, now)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason

    def observe_content(self, content: str, tier: Any = None) -> None:
        """Account for a chunk whose one delta has only content (`replies.plain_content`).

        The same as `observe_chunk` of that chunk (`tier`: its `service_tier`), without
        walking it again.
        """
        self.chunks += 1
        now = self.clock()
        if isinstance(tier, str):
            self.service_tier = tier
        if not content:
            return
        self.answer_parts.append(content)
        if self.first_token is None:
            self.first_token = now
        if self.first_answer_token is None:
            self.first_answer_token = now
        self.last_token = now

    def observe_contents(self, found: list[tuple[str, Any]], first_at: float | None) -> None:
        """`observe_content` of each `(content, tier)` in `found`, chunks of one read in order.

        `first_at`: the clock when the first of them with content was read (None if none
        had any); the last token's time is read here, after the last of them. The same
        state as `observe_content` per chunk, for two clock readings instead of one per
        chunk.
        """
        self.chunks += len(found)
        parts = self.answer_parts
        for content, tier in found:
            if content:
                parts.append(content)
            if isinstance(tier, str):
                self.service_tier = tier
        if first_at is None:
            return
        if self.first_token is None:
            self.first_token = first_at
        if self.first_answer_token is None:
            self.first_answer_token = first_at
        self.last_token = self.clock()

    def observe_reply(self, reply: dict[str, Any]) -> None:
        """Account for a whole non-streaming `chat.completion` (no token times: none seen)."""
        self._observe_meta(reply)
        for choice in _objects(reply.get("choices")):
            self._observe_text(_object(choice.get("message")))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason

    def _observe_meta(self, payload: dict[str, Any]) -> None:
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.usage = usage_from_openai(usage)
            if isinstance(usage.get("speed"), str):  # Anthropic's fast mode, via litellm
                self.speed = usage["speed"]
        tier = payload.get("service_tier")
        if not isinstance(tier, str) and isinstance(usage, dict):
            tier = usage.get("service_tier")  # Anthropic's `usage.service_tier`, via litellm
        if isinstance(tier, str):
            self.service_tier = tier

    def _observe_text(self, message: dict[str, Any]) -> tuple[bool, bool]:
        """Keep the message's reasoning and answer; say whether it had each."""
        thought = reasoning_text(message)
        content = message.get("content")
        answered = (isinstance(content, str) and bool(content)) or bool(message.get("tool_calls"))
        if thought:
            self.reasoning_parts.append(thought)
        if isinstance(content, str) and content:
            self.answer_parts.append(content)
        return bool(thought), answered

    def _observe_delta(self, delta: dict[str, Any], now: float) -> None:
        thought, answered = self._observe_text(delta)
        if not (thought or answered):
            return
        if self.first_token is None:
            self.first_token = now
        if answered and self.first_answer_token is None:
            self.first_answer_token = now
        self.last_token = now

    @property
    def seen_reasoning(self) -> str:
        return "".join(self.reasoning_parts)

    @property
    def seen_answer(self) -> str:
        return "".join(self.answer_parts)


def _objects(value: Any) -> list[dict[str, Any]]:
    """The objects in a JSON list; anything else is read as an empty list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
