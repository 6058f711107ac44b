"""Enforce a thinking budget on a stream whose backend has no hard cap of its own.

When the reasoning passes the budget, the upstream generation is stopped and continued
with the reasoning so far plus the end-of-thinking marker as an assistant prefix (vLLM's
and SGLang's `continue_final_message`), so the model answers at once. The client sees one
uninterrupted stream; the usage it is shown covers both upstream calls.

A backend that cannot continue (`close_only`, from a route's `thinking_overrun: cut`) has
its stream ended cleanly at the budget instead: a last chunk with `finish_reason:
length`, the usage of the cut call (counted from the stream), and `[DONE]`.

Chat's relay applies the cap chunk by chunk as it relays. A request whose client speaks
another protocol (Anthropic Messages or Responses, translated to chat) has its chat
stream wrapped in `CappedStream` instead, before it is translated: the translator sees
one chat stream, already cut and continued, with the usage of both calls at its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import tokens
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import reasoning_text
from gateway.policy.stream import continuation_request
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.upstream.base import UpstreamCall, UpstreamStream
from gateway.upstream.sse import DONE_EVENT, data_event, event_data, event_json
from gateway.usage import Usage, usage_from_openai

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
        prompt = await asyncio.to_thread(prompt_tokens, self.body)
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


def thinking_cap_for(
    ctx: RequestContext, call: UpstreamCall, services: Services
) -> ThinkingCap | None:
    """The stream-enforced thinking cap of a chat call, when the policy set one."""
    if ctx.thinking_cap is None:
        return None

    async def open_continuation(body: dict[str, Any]) -> UpstreamStream:
        follow_up = services.upstreams.build_call(
            call.alias, call.route, orjson.dumps(body), body, stream=True
        )
        follow_up.timeouts, follow_up.extra_headers = call.timeouts, call.extra_headers
        return await services.upstreams.adapter(call.route).open_stream(follow_up)

    closes = ctx.thinking_cap_closes
    return ThinkingCap(ctx.thinking_cap, dict(call.parsed), open_continuation, close_only=closes)


class CappedStream:
    """A chat stream with the thinking cap applied: cut, continued, one usage at its end.

    What comes out is a chat stream as the client of chat's relay sees it: the chunk that
    used up the budget, then the continuation's chunks without its opening role chunk, and
    its usage chunk rewritten to cover both calls (or, with `close_only`, the closing
    chunk with `finish_reason: length`). Closing it closes whichever upstream call is open.
    """

    def __init__(self, stream: UpstreamStream, cap: ThinkingCap) -> None:
        self.headers = stream.headers
        self._stream, self._cap = stream, cap
        self._events: AsyncIterator[bytes] | None = None

    async def events(self) -> AsyncIterator[bytes]:
        while True:
            self._events = self._stream.events()
            cut = False
            async for event in self._events:
                chunk = event_json(event)
                if chunk is None:
                    yield event
                    continue
                outgoing, cut = self._outgoing(chunk, event)
                if outgoing is not None:
                    yield outgoing
                if cut:
                    break
            if not cut:
                return
            await self._close_current()
            self._stream = await self._cap.continue_stream()

    def _outgoing(self, chunk: dict[str, Any], event: bytes) -> tuple[bytes | None, bool]:
        """The bytes to pass on for one chunk, and whether the budget is used up now."""
        cap = self._cap
        if cap.cut and is_role_only(chunk):
            return None, False  # the continuation's opening chunk: the client had one
        if cap.passes_budget(chunk):
            return event, True
        usage = chunk.get("usage")
        if cap.cut and isinstance(usage, dict) and not chunk.get("choices"):
            combined = cap.combined(usage_from_openai(usage)).to_openai()
            data = patch_object(event_data(event) or b"{}", {"usage": combined}, trusted=True)
            return b"data: " + data + b"\n\n", False
        return event, False

    async def _close_current(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()
        await self._stream.aclose()

    async def aclose(self) -> None:
        await self._close_current()


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


def prompt_tokens(body: dict[str, Any]) -> int:
    """The gateway's count of a chat body's prompt (its text messages), for a cut call."""
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
