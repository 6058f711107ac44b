"""vLLM's legacy text completions route: `POST /v1/completions`.

The prompt is a string or one list of token ids (OpenAI's and vLLM's `prompt` forms), sent
to the model as is: no chat template. It shares the chat route's prefix cache, timing,
faults and request log; the output is the same single-token words. `max_tokens` defaults
to 16, as OpenAI's and vLLM's do, so a request without a cap ends with `length`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import tokens
from gateway.sim.config import SimModel
from gateway.sim.errors import SimRequestError, describe_validation, vllm_error
from gateway.sim.generator import OutputPlan, plan_output, rng_for
from gateway.sim.intake import EarlyResponseError, admit, deliver
from gateway.sim.openai_api import VLLM
from gateway.sim.openai_request import StreamOptions
from gateway.sim.prefix_cache import TokenChain, root_key
from gateway.sim.state import SimState
from gateway.sim.timing import Pacer, Timing, plan_timing

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(BaseModel):
    """The fields of a text completion the simulator acts on; others are accepted."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: Prompt
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    best_of: int | None = None
    echo: bool | None = False
    suffix: str | None = None
    logprobs: int | None = None
    seed: int | None = None
    cache_salt: str | None = None


@dataclass(frozen=True)
class CompletionJob:
    """A validated text completion with its planned output, cache hit and timing."""

    request: CompletionRequest
    model: SimModel
    completion_id: str
    created: int
    prompt_tokens: int
    cached_tokens: int
    plan: OutputPlan
    timing: Timing

    def usage(self) -> dict[str, Any]:
        """vLLM's usage object, cached tokens included."""
        completion = self.plan.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


def parse_completion(body: bytes) -> CompletionRequest:
    """Decode and validate the body, refusing what the simulator does not serve."""
    try:
        data = orjson.loads(body)
        request = CompletionRequest.model_validate(data)
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(400, f"JSON decode error: {exc}", kind="Bad Request") from exc
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise SimRequestError(400, message, kind="Bad Request", param=param) from exc
    if data.get("stream_options") and not data.get("stream"):
        raise SimRequestError(
            400, "Stream options can only be defined when `stream=True`.", param="stream_options"
        )
    if request.n not in (None, 1) or request.best_of not in (None, 1):
        raise SimRequestError(400, "The simulator only supports n=1 and best_of=1.", param="n")
    if request.echo or request.suffix is not None or request.logprobs is not None:
        raise SimRequestError(
            400, "The simulator does not support echo, suffix or logprobs.", param="echo"
        )
    return request


def prompt_ids(prompt: Prompt) -> tuple[list[int], str]:
    """The prompt's token ids and a text form for seeding: one prompt only."""
    if isinstance(prompt, str):
        if not prompt:
            raise SimRequestError(400, "Prompt cannot be empty.", param="prompt")
        return tokens.encode(prompt), prompt
    if not prompt:
        raise SimRequestError(400, "Prompt cannot be empty.", param="prompt")
    if all(isinstance(item, int) for item in prompt):
        ids = [int(item) for item in prompt]  # type: ignore[arg-type]
        return ids, " ".join(map(str, ids))
    if len(prompt) != 1:
        raise SimRequestError(
            400, "The simulator serves one prompt per request, not a batch.", param="prompt"
        )
    return prompt_ids(prompt[0])  # type: ignore[arg-type]


def generating_model(state: SimState, name: str | None) -> SimModel:
    """The served model of that name, refusing unknown and embedding models as vLLM does."""
    model = state.config.find_model(name, "openai")
    if model is None:
        raise SimRequestError(
            404, f"The model `{name}` does not exist.", kind="NotFoundError", param="model"
        )
    if model.embedding_dimensions is not None:
        raise SimRequestError(
            400, f"The model `{model.name}` is an embedding model: it generates no text."
        )
    return model


def prepare_completion(state: SimState, body: bytes) -> CompletionJob:
    """Validate, tokenize, consult the prefix cache and plan output and timing."""
    request = parse_completion(body)
    model = generating_model(state, request.model)
    ids, text = prompt_ids(request.prompt)
    limit = request.max_tokens or DEFAULT_MAX_TOKENS
    if len(ids) + limit > model.max_model_len:
        raise SimRequestError(
            400,
            f"This model's maximum context length is {model.max_model_len} tokens. However, "
            f"you requested {len(ids) + limit} tokens ({len(ids)} in the messages, {limit} in "
            "the completion). Please reduce the length of the messages or completion.",
            param="max_tokens",
        )
    seed = request.seed if request.seed is not None else state.config.seed
    plan = plan_output(rng_for(seed, text), 0, model.output_tokens, limit)
    chain = TokenChain.build(
        root_key("openai", model.name, request.cache_salt or ""), ids, state.config.block_size
    )
    output_ids = [tid for piece in plan.content for tid in tokens.encode(piece)]
    cached = state.prefix_cache.lookup_and_insert(chain.extended(output_ids).keys, len(ids))
    timing = plan_timing(state.config, model, "default", len(ids) - cached, len(plan.content))
    return CompletionJob(
        request, model, f"cmpl-{uuid.uuid4().hex}", int(time.time()), len(ids), cached, plan, timing
    )


def _choice(text: str, finish_reason: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
            "stop_reason": None}  # fmt: skip


def _object(job: CompletionJob, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": job.completion_id, "object": "text_completion", "created": job.created,
            "model": job.model.name, "choices": choices, **extra}  # fmt: skip


def completion_body(job: CompletionJob) -> dict[str, Any]:
    """The whole `text_completion` object."""
    choice = _choice(job.plan.content_text, job.plan.finish_reason)
    return _object(job, [choice], system_fingerprint=None, usage=job.usage())


async def completion_chunks(job: CompletionJob) -> AsyncGenerator[bytes, None]:
    """One chunk per token (the last carries the finish reason), usage if asked, [DONE]."""
    pacer = Pacer(job.timing)
    await pacer.prefill()
    pieces = job.plan.content
    for index, word in enumerate(pieces):
        await pacer.token(index)
        reason = job.plan.finish_reason if index == len(pieces) - 1 else None
        yield b"data: " + orjson.dumps(_object(job, [_choice(word, reason)])) + b"\n\n"
    options = job.request.stream_options
    if options is not None and options.include_usage:
        yield b"data: " + orjson.dumps(_object(job, [], usage=job.usage())) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def completions(request: Request) -> Response:
    """Answer a text completion, streamed or whole, as vLLM would."""
    state: SimState = request.app.state.sim
    try:
        admission = await admit(request, state, VLLM)
    except EarlyResponseError as early:
        return early.response
    try:
        job = prepare_completion(state, admission.body)
    except SimRequestError as error:
        admission.record.status = error.status
        return vllm_error(error)
    record = admission.record
    record.model, record.status = job.model.name, 200
    record.prompt_tokens, record.cached_tokens = job.prompt_tokens, job.cached_tokens
    record.completion_tokens = job.plan.completion_tokens
    record.finish_reason = job.plan.finish_reason
    record.planned_prefill_ms = job.timing.prefill_ms
    record.planned_decode_ms = job.timing.decode_ms
    headers = job.timing.headers(job.cached_tokens)
    events = completion_chunks(job) if job.request.stream else None
    return await deliver(request, admission, job.timing, headers, events,
                         lambda: completion_body(job))  # fmt: skip


def completions_routes() -> list[Route]:
    """Return the text completions route."""
    return [Route("/v1/completions", completions, methods=["POST"])]
