"""The Messages token counter, /v1/messages/count_tokens, answered as Anthropic does.

The endpoint takes the prompt half of a Messages request only: `max_tokens`, `stream`,
`metadata`, sampling and tier fields are refused like any unknown field ("<field>: Extra
inputs are not permitted"). The count is the prompt the simulator would bill for the
same request: tools, system and messages, rendered as `/v1/messages` renders them.
"""

from __future__ import annotations

import asyncio

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.sim.anthropic_request import MessagesRequest, render_blocks
from gateway.sim.errors import SimRequestError, anthropic_error, describe_validation
from gateway.sim.intake import Dialect, EarlyResponseError, admit
from gateway.sim.state import SimState

COUNT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "cache_control",
        "output_config",
        "output_format",
        "speed",
        "context_management",
        "mcp_servers",
    }
)
"""Top-level fields the token counter takes; any other is refused."""


def parse_count_request(body: bytes) -> MessagesRequest:
    """Decode and validate a count request, raising Anthropic's 400s."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(400, f"There was an error parsing the body: {exc}") from exc
    if not isinstance(data, dict):
        raise SimRequestError(400, "The request body must be a JSON object.")
    extra = next((name for name in data if name not in COUNT_FIELDS), None)
    if extra is not None:
        raise SimRequestError(400, f"{extra}: Extra inputs are not permitted")
    try:
        # max_tokens is not part of a count; the renderer's model requires one.
        return MessagesRequest.model_validate({**data, "max_tokens": 1})
    except ValidationError as exc:
        raise SimRequestError(400, describe_validation(exc)[0]) from exc


async def count_tokens(request: Request, state: SimState, dialect: Dialect) -> Response:
    """The prompt's token count, `{"input_tokens": n}`."""
    try:
        admission = await admit(request, state, dialect)
    except EarlyResponseError as early:
        return early.response
    record = admission.record
    try:
        if not request.headers.get("anthropic-version"):
            raise SimRequestError(400, "anthropic-version: header is required")
        parsed = parse_count_request(admission.body)
        if state.config.find_model(parsed.model, "anthropic") is None:
            raise SimRequestError(404, f"model: {parsed.model}")
        blocks = await asyncio.to_thread(render_blocks, parsed)
    except SimRequestError as error:
        record.status = error.status
        return anthropic_error(error)
    record.status = 200
    record.prompt_tokens = len(blocks.token_ids)
    record.completed = True
    return JSONResponse({"input_tokens": len(blocks.token_ids)})
