"""The Anthropic Messages route, /v1/messages, for testing litellm's Anthropic path offline."""

from __future__ import annotations

import asyncio
import secrets

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.sim.anthropic_count import count_tokens
from gateway.sim.anthropic_request import (
    FAST_MODE_BETA,
    MessagesRequest,
    RenderedBlocks,
    ThinkingEnabled,
    parse_messages_request,
    render_blocks,
)
from gateway.sim.anthropic_wire import MessageJob, event_stream, message_body
from gateway.sim.config import SimModel
from gateway.sim.errors import (
    SimRequestError,
    anthropic_error,
    anthropic_error_body,
    new_request_id,
)
from gateway.sim.generator import OutputPlan, plan_output, rng_for, scaled_length
from gateway.sim.intake import Admission, Dialect, EarlyResponseError, admit, deliver
from gateway.sim.prefix_cache import BlockKey, TokenChain, root_key
from gateway.sim.state import SimState
from gateway.sim.timing import plan_timing
from gateway.sim.tool_calls import messages_call


def _unauthorized() -> Response:
    return anthropic_error(SimRequestError(401, "invalid x-api-key"))


ANTHROPIC = Dialect(
    api="anthropic",
    credential=lambda request: request.headers.get("x-api-key"),
    unauthorized=_unauthorized,
    error_body=lambda status, message: anthropic_error_body(status, message),
    tier_names=lambda tier: {tier, "standard"} if tier in (None, "auto") else {tier},
)


def _reasoning_length(request: MessagesRequest, model: SimModel) -> int:
    """Return thinking tokens: none unless enabled or adaptive, and within the budget."""
    thinking = request.thinking
    if thinking is None or thinking.type == "disabled":
        return 0
    if not model.thinking:
        raise SimRequestError(400, f"thinking: model {model.name} does not support thinking.")
    length = scaled_length(model.reasoning_tokens, request.effort)
    if isinstance(thinking, ThinkingEnabled):
        length = min(length, thinking.budget_tokens)
    return length


def _plan(
    state: SimState, request: MessagesRequest, model: SimModel, blocks: RenderedBlocks
) -> OutputPlan:
    return plan_output(
        rng_for(state.config.seed, blocks.text),
        _reasoning_length(request, model),
        model.output_tokens,
        request.max_tokens,
        continuing=blocks.prefill is not None,
    )


def _render(
    parsed: MessagesRequest, root: BlockKey, block_size: int
) -> tuple[RenderedBlocks, TokenChain]:
    blocks = render_blocks(parsed)
    return blocks, TokenChain.build(root, blocks.token_ids, block_size)


async def prepare(state: SimState, request: Request, body: bytes) -> MessageJob:
    """Validate, render, apply the breakpoint cache, and plan output and timing."""
    if not request.headers.get("anthropic-version"):
        raise SimRequestError(400, "anthropic-version: header is required")
    parsed = parse_messages_request(body)
    model = state.config.find_model(parsed.model, "anthropic")
    if model is None:
        raise SimRequestError(404, f"model: {parsed.model}")
    check_system_turns(parsed, model)
    root = root_key("anthropic", model.name)
    # Tokenizing and hashing a long prompt takes tens of milliseconds; keep the loop free.
    blocks, chain = await asyncio.to_thread(_render, parsed, root, state.config.block_size)
    plan = _plan(state, parsed, model, blocks)
    config = state.config
    call = messages_call(
        parsed, config.tool_script, config.tool_rounds, rng_for(config.seed, blocks.text)
    )
    if call is not None:
        plan = OutputPlan(plan.reasoning, (), "stop")  # the call replaces the text answer
    cache = state.breakpoints.apply(
        chain, blocks.boundaries, blocks.breakpoints, model.min_cacheable_tokens
    )
    check_speed(parsed, model, request.headers.get("anthropic-beta", ""))
    fast = parsed.speed == "fast"
    priority = model.priority_capacity and parsed.service_tier != "standard_only"
    prompt_tokens = len(blocks.token_ids)
    timing = plan_timing(
        state.config,
        model,
        "fast" if fast else ("priority" if priority else "standard"),
        prompt_tokens - cache.read,
        plan.completion_tokens + (call.output_tokens if call is not None else 0),
    )
    return MessageJob(
        request=parsed,
        model=model,
        message_id="msg_sim" + secrets.token_hex(12),
        prompt_tokens=prompt_tokens,
        cache=cache,
        plan=plan,
        timing=timing,
        fast=fast,
        service_tier="priority" if priority else "standard",
        tool_call=call,
    )


def check_system_turns(parsed: MessagesRequest, model: SimModel) -> None:
    """Refuse a `system` turn in `messages` where the model has no mid-conversation system."""
    if model.mid_conversation_system:
        return
    for index, message in enumerate(parsed.messages):
        if message.role == "system":
            raise SimRequestError(
                400, f"messages.{index}.role: Input should be 'user' or 'assistant'"
            )


def check_speed(parsed: MessagesRequest, model: SimModel, beta: str) -> None:
    """Refuse `speed` as the API does: only with the fast-mode beta, only on a fast model."""
    if parsed.speed is None:
        return
    betas = {value.strip() for value in beta.split(",")}
    if FAST_MODE_BETA not in betas:
        raise SimRequestError(400, "speed: Extra inputs are not permitted")
    if parsed.speed == "fast" and not model.supports_fast_mode:
        raise SimRequestError(400, f"speed: fast mode is not supported for model {model.name}")


def _record(admission: Admission, job: MessageJob) -> None:
    record = admission.record
    record.speed = "fast" if job.fast else "standard"
    record.model = job.model.name
    record.status = 200
    record.prompt_tokens = job.prompt_tokens
    record.cached_tokens = job.cache.read
    record.cache_creation_tokens = job.cache.written
    record.completion_tokens = job.output_tokens
    record.reasoning_tokens = job.plan.reasoning_tokens
    record.finish_reason = job.stop_reason
    record.planned_prefill_ms = job.timing.prefill_ms
    record.planned_decode_ms = job.timing.decode_ms


async def create_message(request: Request) -> Response:
    """Answer a Messages request, streaming or not, as Anthropic would."""
    state: SimState = request.app.state.sim
    try:
        admission = await admit(request, state, ANTHROPIC)
    except EarlyResponseError as early:
        return early.response
    try:
        job = await prepare(state, request, admission.body)
    except SimRequestError as error:
        admission.record.status = error.status
        return anthropic_error(error)
    _record(admission, job)
    headers = job.timing.headers(job.cache.read)
    headers["request-id"] = new_request_id()
    events = event_stream(job) if job.request.stream else None
    return await deliver(request, admission, job.timing, headers, events, lambda: message_body(job))


async def count_message_tokens(request: Request) -> Response:
    """Count a Messages prompt's tokens, as Anthropic's /v1/messages/count_tokens does."""
    return await count_tokens(request, request.app.state.sim, ANTHROPIC)


def anthropic_routes() -> list[Route]:
    """Return the Anthropic-compatible routes."""
    return [
        Route("/v1/messages", create_message, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_message_tokens, methods=["POST"]),
    ]
