"""POST /v1/responses: OpenAI's Responses API, as OpenAI and vLLM's Responses server serve it.

The request runs through the simulator's chat machinery (the same prompt rendering,
prefix cache, timing and faults as /v1/chat/completions): its instructions and input
items become chat messages (`gateway.upstream.responses_wire`), and the reply is told
back as a Response object or the typed event stream. Responses are kept in memory unless
`store: false`, so `previous_response_id` continues a stored one; what the real API
refuses is refused with its error: an unknown `previous_response_id`
(`previous_response_not_found`), `max_output_tokens` below 16, a missing `model` or
`input`, a tool type the API does not have. Offered function tools are called by the chat
route's plan (`gateway.sim.tool_calls`: `metadata.sim_tool_rounds`, `tool_rounds`,
`tool_script`, `tool_choice`), told back as function_call items with their argument
deltas. The API's other tool types (hosted ones like `web_search`, `custom` and
`namespace` groups, as Codex offers) are accepted and never called.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.sim.errors import SimRequestError
from gateway.sim.intake import Dialect, EarlyResponseError, admit, deliver
from gateway.sim.openai_api import VLLM, _record, prepare, with_tool_call
from gateway.sim.openai_wire import ChatJob, chunk_stream, completion_body
from gateway.sim.state import SimState
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.upstream.responses_wire import (
    chat_body,
    input_items,
    new_id,
    response_from_chat,
)
from gateway.usage import usage_from_openai

MIN_OUTPUT_TOKENS = 16  # OpenAI refuses a smaller max_output_tokens
MAX_KEPT = 10_000  # stored responses kept, oldest dropped first
# Tool types the Responses API takes besides `function`; the simulator never calls them.
UNCALLED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "local_shell",
        "shell",
        "apply_patch",
        "mcp",
        "custom",
        "namespace",
        "tool_search",
    }
)


def openai_error_body(
    status: int,
    message: str,
    kind: str | None = None,
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error object (its `code` is a name, not vLLM's integer status)."""
    error_type = kind or ("invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


OPENAI = Dialect(
    api="openai",
    credential=VLLM.credential,
    unauthorized=VLLM.unauthorized,
    error_body=lambda status, message: openai_error_body(status, message),
    tier_names=VLLM.tier_names,
)


class _Refusal(SimRequestError):
    def __init__(self, message: str, param: str | None, code: str | None, status: int = 400):
        super().__init__(status, message, kind="invalid_request_error", param=param)
        self.code = code


def _stored(request: Request) -> dict[str, list[dict[str, Any]]]:
    """The responses this simulator kept (their whole conversations), by id."""
    kept: dict[str, list[dict[str, Any]]] | None = getattr(request.app.state, "responses", None)
    if kept is None:
        kept = {}
        request.app.state.responses = kept
    return kept


def _validate(body: Any, kept: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The conversation the request continues plus its input, or OpenAI's refusal."""
    if not isinstance(body, dict):
        raise _Refusal("The request body must be a JSON object.", None, None)
    if not isinstance(body.get("model"), str):
        raise _Refusal(
            "Missing required parameter: 'model'.", "model", "missing_required_parameter"
        )
    if "input" not in body:
        raise _Refusal(
            "Missing required parameter: 'input'.", "input", "missing_required_parameter"
        )
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and limit < MIN_OUTPUT_TOKENS:
        raise _Refusal(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{MIN_OUTPUT_TOKENS}, but got {limit} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )
    previous = body.get("previous_response_id")
    history: list[dict[str, Any]] = []
    if previous is not None:
        if previous not in kept:
            raise _Refusal(
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        history = kept[previous]
    return history + input_items(body.get("input"))


def _refused(error: SimRequestError) -> Response:
    code = error.code if isinstance(error, _Refusal) else None
    body = openai_error_body(error.status, error.message, error.kind, error.param, code)
    return JSONResponse(body, status_code=error.status)


def _function_tools(body: dict[str, Any]) -> dict[str, Any]:
    """The body with only its function tools (others are accepted, never called)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return body
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function" and kind not in UNCALLED_TOOLS:
            raise _Refusal(
                f"Invalid value: {kind!r}. Supported values are: 'function', "
                + ", ".join(f"'{name}'" for name in sorted(UNCALLED_TOOLS))
                + ".",
                f"tools[{index}].type",
                "invalid_value",
            )
    return body | {"tools": [t for t in tools if t.get("type") == "function"]}


async def _job(state: SimState, body: dict[str, Any], items: list[dict[str, Any]]) -> ChatJob:
    try:
        chat = chat_body(_function_tools(body), items)
    except ValueError as exc:
        raise _Refusal(
            f"The simulator serves function tools only ({exc}).", "tools", None
        ) from None
    # The chat route's own tool plan (gateway/sim/tool_calls.py): one behaviour for both APIs.
    return with_tool_call(state, await prepare(state, orjson.dumps(chat)))


def _keep(
    kept: dict[str, list[dict[str, Any]]],
    body: dict[str, Any],
    response_id: str,
    items: list[dict[str, Any]],
    output: list[dict[str, Any]],
) -> None:
    if body.get("store") is False:
        return
    kept[response_id] = items + output
    while len(kept) > MAX_KEPT:
        kept.pop(next(iter(kept)))


async def _events(
    job: ChatJob, body: dict[str, Any], response_id: str, finished: Any
) -> AsyncGenerator[bytes, None]:
    """The chat stream of `job`, told as Responses events."""
    teller = ChatToResponses(body, response_id, int(time.time()))
    for event in teller.start():
        yield sse(event)
    async for raw in chunk_stream(job):
        data = raw.removeprefix(b"data: ").strip()
        if data == b"[DONE]":
            break
        chunk = orjson.loads(data)
        if isinstance(chunk.get("usage"), dict):
            usage = usage_from_openai(chunk["usage"])
            for event in teller.finish(usage):
                yield sse(event)
            finished(teller.output)
            continue
        for event in teller.feed(chunk):
            yield sse(event)


async def create_response(request: Request) -> Response:
    """Answer a Responses request, streamed or whole."""
    state: SimState = request.app.state.sim
    try:
        admission = await admit(request, state, OPENAI)
    except EarlyResponseError as early:
        return early.response
    kept = _stored(request)
    try:
        body = orjson.loads(admission.body)
        items = _validate(body, kept)
        job = await _job(state, body, items)
    except orjson.JSONDecodeError:
        admission.record.status = 400
        return _refused(_Refusal("We could not parse the JSON body of your request.", None, None))
    except SimRequestError as error:
        admission.record.status = error.status
        return _refused(error)
    _record(admission, job)
    response_id = new_id("resp")
    headers = job.timing.headers(job.cached_tokens)
    headers["x-request-id"] = request.headers.get("x-request-id", response_id)

    def finished(output: list[dict[str, Any]]) -> None:
        _keep(kept, body, response_id, items, output)

    def whole() -> dict[str, Any]:
        reply = completion_body(job)
        response = response_from_chat(body, reply, usage_from_openai(reply["usage"]), response_id)
        finished(response["output"])
        return response

    events = _events(job, body, response_id, finished) if job.request.stream else None
    return await deliver(request, admission, job.timing, headers, events, whole)


def responses_routes() -> list[Route]:
    """The Responses API route."""
    return [Route("/v1/responses", create_response, methods=["POST"])]
