"""Anthropic Messages bodies: the full message and the named SSE event sequence."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.sim.anthropic_cache import CacheUsage
from gateway.sim.anthropic_request import MessagesRequest
from gateway.sim.config import SimModel
from gateway.sim.generator import OutputPlan, signature_for
from gateway.sim.timing import Pacer, Timing
from gateway.sim.tool_calls import PlannedCall


@dataclass(frozen=True)
class MessageJob:
    """A validated Messages request with its cache split, planned output and timing."""

    request: MessagesRequest
    model: SimModel
    message_id: str
    prompt_tokens: int
    cache: CacheUsage
    plan: OutputPlan
    timing: Timing
    fast: bool
    service_tier: str = "standard"  # the capacity that served it: standard or priority
    tool_call: PlannedCall | None = None  # a tool_use instead of a text answer

    @property
    def output_tokens(self) -> int:
        """Return output tokens: thinking, text and the tool_use's name and input."""
        called = self.tool_call.output_tokens if self.tool_call is not None else 0
        return self.plan.completion_tokens + called

    @property
    def input_tokens(self) -> int:
        """Return prompt tokens neither read from nor written to the cache."""
        return self.prompt_tokens - self.cache.read - self.cache.written

    @property
    def stop_reason(self) -> str:
        """Return Anthropic's name for why generation stopped."""
        if self.tool_call is not None:
            return "tool_use"
        return "max_tokens" if self.plan.finish_reason == "length" else "end_turn"


def usage(job: MessageJob, output_tokens: int | None = None) -> dict[str, Any]:
    """Return the usage object; input_tokens excludes cache reads and writes."""
    body: dict[str, Any] = {
        "input_tokens": job.input_tokens,
        "cache_creation_input_tokens": job.cache.written,
        "cache_read_input_tokens": job.cache.read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": job.cache.write_5m,
            "ephemeral_1h_input_tokens": job.cache.write_1h,
        },
        "output_tokens": job.output_tokens if output_tokens is None else output_tokens,
        "service_tier": job.service_tier,
    }
    if job.request.speed is not None:
        body["speed"] = "fast" if job.fast else "standard"
    return body


def content_blocks(job: MessageJob) -> list[dict[str, Any]]:
    """Return the thinking block (if any) then the text block (if any)."""
    blocks: list[dict[str, Any]] = []
    plan = job.plan
    if plan.reasoning:
        text = plan.reasoning_text
        blocks.append({"type": "thinking", "thinking": text, "signature": signature_for(text)})
    if plan.content:
        blocks.append({"type": "text", "text": plan.content_text})
    if job.tool_call is not None:
        blocks.append(_tool_use(job.tool_call, orjson.loads(job.tool_call.arguments)))
    return blocks


def _tool_use(call: PlannedCall, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.call_id, "name": call.name, "input": arguments}


def message_body(job: MessageJob) -> dict[str, Any]:
    """Return the non-streaming Message object."""
    return {
        "id": job.message_id,
        "type": "message",
        "role": "assistant",
        "model": job.model.name,
        "content": content_blocks(job),
        "stop_reason": job.stop_reason,
        "stop_sequence": None,
        "usage": usage(job),
    }


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


def _start_message(job: MessageJob) -> dict[str, Any]:
    return {**message_body(job), "content": [], "stop_reason": None, "usage": usage(job, 1)}


async def event_stream(job: MessageJob) -> AsyncGenerator[bytes, None]:
    """Yield message_start, each block's start/deltas/stop, message_delta and message_stop."""
    pacer = Pacer(job.timing)
    await pacer.prefill()
    yield _event("message_start", {"message": _start_message(job)})
    plan = job.plan
    sent = 0
    blocks = [("thinking", plan.reasoning), ("text", plan.content)]
    index = 0
    for kind, words in blocks:
        if not words:
            continue
        empty: dict[str, Any] = {"type": kind, kind: ""}
        if kind == "thinking":
            empty["signature"] = ""
        yield _event("content_block_start", {"index": index, "content_block": empty})
        if index == 0:
            yield _event("ping", {})
        for word in words:
            await pacer.token(sent)
            sent += 1
            delta = {"type": f"{kind}_delta", kind: word}
            yield _event("content_block_delta", {"index": index, "delta": delta})
        if kind == "thinking":
            signature = {"type": "signature_delta", "signature": signature_for(plan.reasoning_text)}
            yield _event("content_block_delta", {"index": index, "delta": signature})
        yield _event("content_block_stop", {"index": index})
        index += 1
    if job.tool_call is not None:
        async for event in _tool_use_events(job.tool_call, index, pacer, sent):
            yield event
    final = usage(job)
    final.pop("cache_creation")
    final.pop("service_tier")
    stop: dict[str, Any] = {"stop_reason": job.stop_reason, "stop_sequence": None}
    yield _event("message_delta", {"delta": stop, "usage": final})
    yield _event("message_stop", {})


async def _tool_use_events(
    call: PlannedCall, index: int, pacer: Pacer, sent: int
) -> AsyncGenerator[bytes, None]:
    """The tool_use block: its start with an empty input, input_json_delta pieces, stop."""
    yield _event("content_block_start", {"index": index, "content_block": _tool_use(call, {})})
    for piece in call.pieces:
        await pacer.token(sent)
        sent += 1
        delta = {"type": "input_json_delta", "partial_json": piece}
        yield _event("content_block_delta", {"index": index, "delta": delta})
    yield _event("content_block_stop", {"index": index})
