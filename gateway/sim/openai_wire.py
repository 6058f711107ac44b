"""vLLM's chat completion bodies: the full response and the SSE chunk sequence."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.sim.config import SimModel
from gateway.sim.generator import OutputPlan
from gateway.sim.openai_request import ChatRequest
from gateway.sim.timing import Pacer, Timing
from gateway.sim.tool_calls import PlannedCall


@dataclass(frozen=True)
class ChatJob:
    """A validated request with its planned output, cache hit and timing."""

    request: ChatRequest
    model: SimModel
    completion_id: str
    created: int
    prompt_tokens: int
    cached_tokens: int
    plan: OutputPlan
    timing: Timing
    usage_override: dict[str, Any] | None = None  # a fault's programmed usage object
    tool_call: PlannedCall | None = None  # a tool call instead of a text answer

    @property
    def completion_tokens(self) -> int:
        """Every output token: reasoning, answer and the tool call."""
        called = self.tool_call.output_tokens if self.tool_call is not None else 0
        return self.plan.completion_tokens + called

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_call is not None else self.plan.finish_reason

    @property
    def role(self) -> str:
        """Return the answering role: the continued message's role when continuing."""
        if self.request.add_generation_prompt:
            return "assistant"
        return str(self.request.messages[-1].get("role", "assistant"))


def usage(job: ChatJob) -> dict[str, Any]:
    """Return vLLM's usage object; reasoning details only for a model with a reasoning parser."""
    if job.usage_override is not None:
        return job.usage_override
    plan = job.plan
    body: dict[str, Any] = {
        "prompt_tokens": job.prompt_tokens,
        "total_tokens": job.prompt_tokens + job.completion_tokens,
        "completion_tokens": job.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": job.cached_tokens},
    }
    if job.model.thinking:
        body["completion_tokens_details"] = {"reasoning_tokens": plan.reasoning_tokens}
    return body


def completion_body(job: ChatJob) -> dict[str, Any]:
    """Return the non-streaming chat.completion object."""
    plan = job.plan
    reasoning = plan.reasoning_text if plan.reasoning and job.request.include_reasoning else None
    message: dict[str, Any] = {
        "role": job.role,
        "content": plan.content_text if plan.content else None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        job.model.reasoning_field: reasoning,
    }
    if job.tool_call is not None:
        message["tool_calls"] = [job.tool_call.message_call()]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": job.finish_reason,
        "stop_reason": None,
    }
    return {
        "id": job.completion_id,
        "object": "chat.completion",
        "created": job.created,
        "model": job.model.name,
        "choices": [choice],
        "service_tier": job.request.echoed_tier,
        "system_fingerprint": None,
        "usage": usage(job),
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


def _chunk(job: ChatJob, choices: list[dict[str, Any]], **extra: Any) -> bytes:
    body = {
        "id": job.completion_id,
        "object": "chat.completion.chunk",
        "created": job.created,
        "model": job.model.name,
        "service_tier": job.request.echoed_tier,
        "choices": choices,
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "logprobs": None,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = None
    return choice


def _pieces(job: ChatJob) -> list[tuple[str | None, str]]:
    """Return (delta field, text) per output token; None marks a token that is not shown."""
    field = job.model.reasoning_field if job.request.include_reasoning else None
    return [(field, word) for word in job.plan.reasoning] + [
        ("content", w) for w in job.plan.content
    ]


def _wants_usage(request: ChatRequest) -> bool:
    return request.stream_options is not None and bool(request.stream_options.include_usage)


async def _tool_call_chunks(
    job: ChatJob, call: PlannedCall, pacer: Pacer, start: int
) -> AsyncGenerator[bytes, None]:
    """The call as vLLM streams it: id and name first, then the arguments piece by piece."""
    await pacer.token(start)
    opening = call.message_call() | {"index": 0}
    opening["function"] = {"name": call.name, "arguments": ""}
    yield _chunk(job, [_choice({"tool_calls": [opening]})])
    for offset, piece in enumerate(call.pieces, start=start + 1):
        await pacer.token(offset)
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        yield _chunk(job, [_choice(delta)])
    yield _chunk(job, [_choice({}, "tool_calls")])


async def chunk_stream(job: ChatJob) -> AsyncGenerator[bytes, None]:
    """Yield the SSE chunks: role, one per token, finish, optional usage, then [DONE]."""
    pacer = Pacer(job.timing)
    await pacer.prefill()
    yield _chunk(job, [_choice({"role": job.role, "content": ""})])
    pieces = _pieces(job)
    length_cut = job.plan.finish_reason == "length"
    for index, (field, word) in enumerate(pieces):
        await pacer.token(index)
        last = index == len(pieces) - 1
        if field is None and not (last and length_cut):
            continue
        delta = {field: word} if field is not None else {}
        # A length cut arrives on the last real token; a stop arrives on the EOS token after it.
        yield _chunk(job, [_choice(delta, "length" if last and length_cut else None)])
    if job.tool_call is not None:
        async for chunk in _tool_call_chunks(job, job.tool_call, pacer, len(pieces)):
            yield chunk
    elif not length_cut:
        # The EOS token decodes to nothing: an empty content delta, or {} behind a reasoning parser.
        yield _chunk(job, [_choice({} if job.model.thinking else {"content": ""}, "stop")])
    if _wants_usage(job.request):
        yield _chunk(job, [], usage=usage(job))
    yield b"data: [DONE]\n\n"
