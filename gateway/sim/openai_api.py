"""The vLLM-compatible routes: /v1/chat/completions, /v1/models, /health, /version."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import tokens
from gateway.sim.config import SimModel
from gateway.sim.errors import SimRequestError, vllm_error, vllm_error_body
from gateway.sim.generator import OutputPlan, plan_output, rng_for, scaled_length
from gateway.sim.intake import Admission, Dialect, EarlyResponseError, admit, authorized, deliver
from gateway.sim.openai_request import (
    ChatRequest,
    RenderedPrompt,
    check_supported,
    parse_chat_request,
    render_prompt,
)
from gateway.sim.openai_wire import ChatJob, chunk_stream, completion_body
from gateway.sim.prefix_cache import BlockKey, TokenChain, root_key
from gateway.sim.state import SimState
from gateway.sim.timing import plan_timing
from gateway.sim.tool_calls import chat_call


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" else None


def _unauthorized() -> Response:
    # vLLM's --api-key middleware answers with this bare body, not its usual error object.
    return JSONResponse({"error": "Unauthorized"}, status_code=401)


def _tier_names(tier: str | None) -> set[str | None]:
    return {tier, "default"} if tier in (None, "auto") else {tier}


VLLM = Dialect(
    api="openai",
    credential=_bearer,
    unauthorized=_unauthorized,
    error_body=vllm_error_body,
    tier_names=_tier_names,
)


def _state(request: Request) -> SimState:
    state: SimState = request.app.state.sim
    return state


def _reasoning_length(request: ChatRequest, model: SimModel, prompt: RenderedPrompt) -> int:
    """Return how many reasoning tokens a thinking model emits for this request."""
    if not model.thinking or not request.thinking_switched_on():
        return 0
    length = scaled_length(model.reasoning_tokens, request.reasoning_effort)
    budget = request.hard_thinking_budget
    if model.supports_thinking_budget and budget is not None and budget >= 0:
        length = min(length, budget)
    prefix = prompt.continuation
    if prefix is None:
        return length
    if model.end_of_thinking in prefix or model.start_of_thinking not in prefix:
        # Thinking already closed (a gateway's stop-and-continue), or an answer is being continued.
        return 0
    already = tokens.count_tokens(prefix.split(model.start_of_thinking, 1)[1])
    return max(length - already, 0)


def _output_limit(request: ChatRequest, model: SimModel, prompt_tokens: int) -> int:
    """Return the output cap, refusing prompts and caps that overflow the context like vLLM."""
    context = model.max_model_len
    if prompt_tokens >= context:
        raise SimRequestError(
            400,
            f"This model's maximum context length is {context} tokens. However, your request "
            f"has {prompt_tokens} input tokens. Please reduce the length of the input messages.",
        )
    limit = request.output_limit
    if limit is None:
        return context - prompt_tokens
    if limit > context - prompt_tokens:
        raise SimRequestError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {limit}. This model's maximum "
            f"context length is {context} tokens and your request has {prompt_tokens} input "
            f"tokens ({limit} > {context} - {prompt_tokens}).",
            param="max_tokens",
        )
    return limit


def _plan(
    state: SimState, request: ChatRequest, model: SimModel, prompt: RenderedPrompt, n: int
) -> OutputPlan:
    seed = request.seed if request.seed is not None else state.config.seed
    return plan_output(
        rng_for(seed, prompt.text),
        _reasoning_length(request, model, prompt),
        model.output_tokens,
        _output_limit(request, model, n),
        continuing=prompt.continuation is not None,
    )


def _tokenize(text: str, root: BlockKey, block_size: int) -> TokenChain:
    return TokenChain.build(root, tokens.encode(text), block_size)


async def prepare(state: SimState, body: bytes) -> ChatJob:
    """Validate, render, tokenize, consult the prefix cache and plan output and timing."""
    request = parse_chat_request(body)
    model = state.config.find_model(request.model, "openai")
    if model is None:
        raise SimRequestError(
            404, f"The model `{request.model}` does not exist.", kind="NotFoundError", param="model"
        )
    if model.embedding_dimensions is not None:
        raise SimRequestError(
            400, f"The model `{model.name}` is an embedding model: it generates no text."
        )
    check_supported(request, model)
    prompt = render_prompt(request, model)
    root = root_key("openai", model.name, request.cache_salt or "")
    # Tokenizing and hashing a long prompt takes tens of milliseconds; keep the loop free.
    chain = await asyncio.to_thread(_tokenize, prompt.text, root, state.config.block_size)
    prompt_len = len(chain.tokens)
    plan = _plan(state, request, model, prompt, prompt_len)
    output_ids = [tid for piece in plan.reasoning + plan.content for tid in tokens.encode(piece)]
    # Generated tokens fill blocks too, so a follow-up turn can hit on the previous answer.
    keys = chain.extended(output_ids).keys
    cached = state.prefix_cache.lookup_and_insert(keys, prompt_len)
    timing = plan_timing(
        state.config, model, request.echoed_tier, prompt_len - cached, plan.completion_tokens
    )
    return ChatJob(
        request=request,
        model=model,
        completion_id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        prompt_tokens=prompt_len,
        cached_tokens=cached,
        plan=plan,
        timing=timing,
    )


def with_tool_call(state: SimState, job: ChatJob) -> ChatJob:
    """The job calling a tool instead of answering, when the plan says so (tool_calls)."""
    request = job.request
    seed = request.seed if request.seed is not None else state.config.seed
    rng = rng_for(seed, orjson.dumps(request.messages).decode())
    call = chat_call(request, state.config.tool_script, state.config.tool_rounds, rng)
    if call is None:
        return job
    plan = OutputPlan(job.plan.reasoning, (), "stop")  # the call replaces the text answer
    timing = dataclasses.replace(
        job.timing, output_tokens=plan.completion_tokens + call.output_tokens
    )
    return dataclasses.replace(job, plan=plan, tool_call=call, timing=timing)


def _record(admission: Admission, job: ChatJob) -> None:
    record = admission.record
    record.model = job.model.name
    record.status = 200
    record.prompt_tokens = job.prompt_tokens
    record.cached_tokens = job.cached_tokens
    record.completion_tokens = job.completion_tokens
    record.reasoning_tokens = job.plan.reasoning_tokens
    record.finish_reason = job.finish_reason
    record.planned_prefill_ms = job.timing.prefill_ms
    record.planned_decode_ms = job.timing.decode_ms


async def chat_completions(request: Request) -> Response:
    """Answer a chat completion, streaming or not, as vLLM would."""
    state = _state(request)
    try:
        admission = await admit(request, state, VLLM)
    except EarlyResponseError as early:
        return early.response
    try:
        job = await prepare(state, admission.body)
    except SimRequestError as error:
        admission.record.status = error.status
        return vllm_error(error)
    job = with_tool_call(state, job)
    _record(admission, job)
    if admission.fault is not None and admission.fault.usage is not None:
        job = dataclasses.replace(job, usage_override=admission.fault.usage)
    headers = job.timing.headers(job.cached_tokens)
    headers["x-request-id"] = request.headers.get("x-request-id", job.completion_id)
    events = chunk_stream(job) if job.request.stream else None
    return await deliver(
        request, admission, job.timing, headers, events, lambda: completion_body(job)
    )


def _model_card(model: SimModel, name: str, created: int) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model.name,
        "parent": None,
        "max_model_len": model.max_model_len,
        "permission": [],
    }


async def list_models(request: Request) -> Response:
    """List the OpenAI-route models."""
    state = _state(request)
    if not authorized(state, _bearer(request)):
        return _unauthorized()
    created = int(time.time())
    openai_models = [m for m in state.config.models if m.api == "openai"]
    # Like vLLM, every served name gets a card, all rooted at the model.
    cards = [_model_card(m, n, created) for m in openai_models for n in (m.name, *m.aliases)]
    return JSONResponse({"object": "list", "data": cards})


async def health(request: Request) -> Response:
    """Answer 200 with an empty body, like vLLM."""
    return Response(status_code=200)


async def version(request: Request) -> Response:
    """Report a version string."""
    return JSONResponse({"version": "farebox-sim"})


def openai_routes() -> list[Route]:
    """Return the vLLM-compatible routes."""
    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
    ]
