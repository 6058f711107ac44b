"""OpenAI's embeddings route: `POST /v1/embeddings`, on the simulator's embedding models.

Inputs are a string, a list of strings, a list of token ids or a list of such lists, as
OpenAI takes them, refused as OpenAI refuses them: an empty string or list, more than
2048 inputs, an input over the model's context (8192 tokens for OpenAI's models),
`dimensions` on a model that cannot shorten its vectors or above its size. Vectors are
unit length and deterministic (seed, model, input); `encoding_format: base64` sends each
as little-endian float32 bytes, which the openai SDK asks for by default and decodes.
Embeddings are prefill only: their time is the input tokens at the prefill rate.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
import time
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import tokens
from gateway.sim.config import SimModel
from gateway.sim.errors import SimRequestError, describe_validation, vllm_error
from gateway.sim.intake import EarlyResponseError, admit, deliver
from gateway.sim.openai_api import VLLM
from gateway.sim.state import SimState
from gateway.sim.timing import plan_timing

MAX_INPUTS = 2048
MAX_TOTAL_TOKENS = 300_000  # summed over a request's inputs
INVALID_INPUT = (
    "'$.input' is invalid. Please check the API reference: "
    "https://platform.openai.com/docs/api-reference."
)

EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(BaseModel):
    """`POST /v1/embeddings` as OpenAI defines it."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None
    seed: int | None = None


def parse_embedding(body: bytes) -> EmbeddingRequest:
    """Decode and validate the body as OpenAI does."""
    try:
        return EmbeddingRequest.model_validate(orjson.loads(body))
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(400, f"JSON decode error: {exc}", kind="Bad Request") from exc
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise SimRequestError(400, message, kind="invalid_request_error", param=param) from exc


def token_lists(value: EmbeddingInput) -> list[list[int]]:
    """Each input's token ids; refuses an empty input or too many of them."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise SimRequestError(400, INVALID_INPUT, kind="invalid_request_error", param="input")
    if all(isinstance(item, int) for item in value):
        return [[int(item) for item in value]]  # type: ignore[arg-type]
    if len(value) > MAX_INPUTS:
        raise SimRequestError(
            400,
            f"'$.input' is invalid: at most {MAX_INPUTS} inputs per request, got {len(value)}.",
            kind="invalid_request_error",
            param="input",
        )
    lists: list[list[int]] = []
    for item in value:
        ids = tokens.encode(item) if isinstance(item, str) else list(item)  # type: ignore[arg-type]
        if not ids:
            raise SimRequestError(400, INVALID_INPUT, kind="invalid_request_error", param="input")
        lists.append(ids)
    return lists


def embedding_model(state: SimState, name: str | None) -> SimModel:
    """The served embedding model of that name, or OpenAI's refusal."""
    model = state.config.find_model(name, "openai")
    if model is None:
        raise SimRequestError(
            404, f"The model `{name}` does not exist.", kind="NotFoundError", param="model"
        )
    if model.embedding_dimensions is None:
        raise SimRequestError(
            400, f"The model `{model.name}` does not support the Embeddings API.", param="model"
        )
    return model


def _dimensions(request: EmbeddingRequest, model: SimModel) -> int:
    size = model.embedding_dimensions or 1
    if request.dimensions is None:
        return size
    if not model.supports_dimensions:
        raise SimRequestError(
            400, "This model does not support specifying dimensions.", param="dimensions"
        )
    if request.dimensions > size:
        raise SimRequestError(
            400,
            f"Invalid value for 'dimensions' = {request.dimensions}: at most {size}.",
            param="dimensions",
        )
    return request.dimensions


def vector(seed: int, model: str, ids: list[int], size: int) -> list[float]:
    """A deterministic unit vector for one input."""
    digest = hashlib.sha256(f"{seed}\x1f{model}\x1f{ids}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    raw = [rng.gauss(0.0, 1.0) for _ in range(size)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    # Rounded through float32, so the float and base64 forms carry the same numbers.
    return list(struct.unpack(f"<{size}f", struct.pack(f"<{size}f", *(x / norm for x in raw))))


def _encoded(values: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
    return values


def embedding_body(
    request: EmbeddingRequest, model: SimModel, inputs: list[list[int]], seed: int
) -> dict[str, Any]:
    """OpenAI's list of embeddings with its usage (input tokens only)."""
    size = _dimensions(request, model)
    data = [
        {"object": "embedding", "index": index,
         "embedding": _encoded(vector(seed, model.name, ids, size), request.encoding_format)}
        for index, ids in enumerate(inputs)
    ]  # fmt: skip
    used = sum(len(ids) for ids in inputs)
    return {"object": "list", "data": data, "model": model.name,
            "usage": {"prompt_tokens": used, "total_tokens": used}}  # fmt: skip


def _check_lengths(model: SimModel, inputs: list[list[int]]) -> None:
    for ids in inputs:
        if len(ids) > model.max_model_len:
            raise SimRequestError(
                400,
                f"This model's maximum context length is {model.max_model_len} tokens, however "
                f"you requested {len(ids)} tokens in the input. Please reduce your input.",
                param="input",
            )
    total = sum(len(ids) for ids in inputs)
    if total > MAX_TOTAL_TOKENS:
        raise SimRequestError(
            400,
            f"Requested {total} tokens, max {MAX_TOTAL_TOKENS} tokens per request.",
            param="input",
        )


async def embeddings(request: Request) -> Response:
    """Answer an embeddings request as OpenAI would, after the planned prefill time."""
    state: SimState = request.app.state.sim
    try:
        admission = await admit(request, state, VLLM)
    except EarlyResponseError as early:
        return early.response
    try:
        parsed = parse_embedding(admission.body)
        model = embedding_model(state, parsed.model)
        inputs = token_lists(parsed.input)
        _check_lengths(model, inputs)
        seed = parsed.seed if parsed.seed is not None else state.config.seed
        body = embedding_body(parsed, model, inputs, seed)  # refuses a bad `dimensions` too
    except SimRequestError as error:
        admission.record.status = error.status
        return vllm_error(error)
    used = body["usage"]["prompt_tokens"]
    timing = plan_timing(state.config, model, "default", used, 0)
    record = admission.record
    record.model, record.status, record.prompt_tokens = model.name, 200, used
    record.planned_prefill_ms = timing.prefill_ms
    headers = timing.headers(0) | {"x-request-id": f"emb-{int(time.time() * 1000)}"}
    return await deliver(request, admission, timing, headers, None, lambda: body)


def embeddings_routes() -> list[Route]:
    """Return the embeddings route."""
    return [Route("/v1/embeddings", embeddings, methods=["POST"])]
