"""Enforce a thinking budget on a stream whose backend has no hard cap of its own.

When the reasoning passes the budget, the upstream generation is stopped and continued
with the reasoning so far plus the end-of-thinking marker as an assistant prefix (vLLM's
and SGLang's `continue_final_message`), so the model answers at once. The client sees one
uninterrupted stream; the usage it is shown covers both upstream calls.

A backend that cannot continue (`close_only`, from a route's `thinking_overrun: cut`) has
its stream ended cleanly at the budget instead: a last chunk with `finish_reason:
length`, the usage of the cut call (counted from the stream), and `[DONE]`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway import tokens
from gateway.pipeline.measure import reasoning_text
from gateway.policy.stream import continuation_request
from gateway.upstream.base import UpstreamStream
from gateway.upstream.sse import DONE_EVENT, data_event
from gateway.usage import Usage

OpenContinuation = Callable[[dict[str, Any]], Awaitable[UpstreamStream]]


@dataclass(slots=True)
class ThinkingCap:
    """The budget, what the stream has thought so far, and how to continue it."""

    budget: int
    body: dict[str, Any]
    open_continuation: OpenContinuation
    close_only: bool = False
    reasoning_chunks: int = 0
    cut: bool = False
    first_call: Usage | None = None
    parts: list[str] = field(default_factory=list)
    last_chunk: dict[str, Any] = field(default_factory=dict)

    def passes_budget(self, chunk: dict[str, Any]) -> bool:
        """Count a reasoning delta; True once the reasoning has used up the budget."""
        if self.cut:
            return False
        self.last_chunk = chunk
        for choice in chunk.get("choices") or ():
            thought = reasoning_text(choice.get("delta") or {})
            if thought:
                self.reasoning_chunks += 1  # one token per delta, as vLLM streams them
                self.parts.append(thought)
        return self.reasoning_chunks >= self.budget

    async def continue_stream(self) -> UpstreamStream:
        """Open the continuation: the reasoning so far, closed, as an assistant prefix."""
        self.cut = True
        reasoning = "".join(self.parts)
        follow_up = continuation_request(
            self.body, reasoning, reasoning_tokens=self.reasoning_chunks
        )
        prompt = await asyncio.to_thread(_prompt_tokens, self.body)
        self.first_call = Usage(
            prompt_tokens=prompt,
            completion_tokens=self.reasoning_chunks,
            reasoning_tokens=self.reasoning_chunks,
            estimated=True,
        )
        if self.close_only:
            return ClosingStream(self.last_chunk)
        return await self.open_continuation(follow_up)

    def combined(self, second: Usage) -> Usage:
        """Usage of both calls: the cut one (counted) and the continuation (reported)."""
        return second if self.first_call is None else self.first_call + second


class ClosingStream:
    """The end of a stream cut at its thinking budget: `length`, empty usage, `[DONE]`.

    The relay adds the cut call's usage to the empty one, as it does for a continuation.
    """

    def __init__(self, last: dict[str, Any]) -> None:
        self.headers: dict[str, str] = {}
        self._envelope = {
            "id": last.get("id") or "chatcmpl-farebox-cut",
            "object": "chat.completion.chunk",
            "created": last.get("created") or 0,
            "model": last.get("model") or "",
        }

    async def events(self) -> AsyncIterator[bytes]:
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        yield data_event({**self._envelope, "choices": [choice]})
        yield data_event({**self._envelope, "choices": [], "usage": usage})
        yield DONE_EVENT

    async def aclose(self) -> None:
        return None


def _prompt_tokens(body: dict[str, Any]) -> int:
    text = "".join(
        m.get("content") for m in body.get("messages") or () if isinstance(m.get("content"), str)
    )
    return tokens.count_tokens(text)


def is_role_only(chunk: dict[str, Any]) -> bool:
    """The continuation's opening chunk (role, empty content): the client already had one."""
    choices = chunk.get("choices") or ()
    if not choices or chunk.get("usage"):
        return False
    for choice in choices:
        delta = choice.get("delta") or {}
        if "role" not in delta or delta.get("content") or choice.get("finish_reason"):
            return False
        if set(delta) - {"role", "content"}:
            return False
    return True
