"""The Responses API request as the pipeline sees it, and the context that carries it.

The pipeline's stages read chat-completions fields (`max_completion_tokens`,
`reasoning_effort`, `messages`), so `ctx.body` holds a chat-shaped view of the request
(`policy_view`): what the policy plans and the prefix checker fingerprints. The client's
own body is `ctx.native`; the policy's edits are mapped back onto it (`native_edits`)
before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from gateway.pipeline.context import BodyEdits, RequestContext
from gateway.schemas.body import invalid_field, load_object
from gateway.upstream.responses_wire import chat_messages, chat_tools

# Chat fields the policy may set or remove, and where each lives in a Responses body.
_SAME_NAME = (
    "model",
    "metadata",
    "service_tier",
    "temperature",
    "top_p",
    "user",
    "parallel_tool_calls",
)
_CAPS = ("max_completion_tokens", "max_tokens")


class ResponsesRequest(BaseModel):
    """The fields of `POST /v1/responses` that the pipeline reads."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: StrictInt | None = Field(default=None, ge=1)
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    store: bool = True
    stream: bool = False


@dataclass(slots=True)
class ResponsesContext(RequestContext):
    """A `RequestContext` whose request is a Responses request."""

    responses: ResponsesRequest | None = None
    native: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)  # earlier turns + this input
    chained: bool = False  # previous_response_id was expanded into `items`

    @property
    def stream(self) -> bool:
        return bool(self.responses and self.responses.stream)

    @property
    def client_wants_usage_chunk(self) -> bool:
        return False  # usage travels in response.completed, always


def parse_responses(ctx: ResponsesContext) -> None:
    """Parse the body into `ctx.native` and `ctx.responses`, or raise a 400 naming the field."""
    body = load_object(ctx.raw_body)
    try:
        ctx.responses = ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
    ctx.native = body


def policy_view(native: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The request in chat terms, for the policy and the prefix check (never sent)."""
    view: dict[str, Any] = {k: native[k] for k in _SAME_NAME if k in native}
    tools = native.get("tools")
    if tools:
        view["tools"] = chat_tools(tools) or tools  # non-function tools fingerprinted as sent
    view["messages"] = chat_messages(native.get("instructions"), items)
    if native.get("max_output_tokens") is not None:
        view["max_completion_tokens"] = native["max_output_tokens"]
    reasoning = native.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        view["reasoning_effort"] = reasoning["effort"]
    view["stream"] = native.get("stream", False)
    return view


def native_edits(edits: BodyEdits, native: dict[str, Any]) -> BodyEdits:
    """The chat-shaped edits of the stages, as edits of the Responses body.

    Output caps become `max_output_tokens`, an effort `reasoning.effort`; fields of the
    same name in both APIs are edited as they are; chat-only fields (`stream_options`,
    `thinking`, ...) have no place in a Responses body and are not sent.
    """
    out = BodyEdits()
    for name in _SAME_NAME:
        if name in edits.set_fields:
            out.set_fields[name] = edits.set_fields[name]
        elif name in edits.remove and name in native:
            out.remove.add(name)
    for cap in _CAPS:
        if cap in edits.set_fields:
            out.set_fields["max_output_tokens"] = edits.set_fields[cap]
        elif cap in edits.remove and "max_output_tokens" in native:
            out.remove.add("max_output_tokens")
    reasoning = native.get("reasoning")
    current = dict(reasoning) if isinstance(reasoning, dict) else {}
    if "reasoning_effort" in edits.set_fields:
        out.set_fields["reasoning"] = {**current, "effort": edits.set_fields["reasoning_effort"]}
    elif "reasoning_effort" in edits.remove and "effort" in current:
        current.pop("effort")
        out.set_fields["reasoning"] = current
    return out


def chat_edits_over(chat: dict[str, Any], edits: BodyEdits) -> dict[str, Any]:
    """A chat body translated from a Responses request, with the stages' edits laid over it.

    The stages plan in chat terms, so their edits apply to the translated body as they are:
    chat-only fields (vLLM's `thinking_token_budget`, `chat_template_kwargs`, ...) reach
    the upstream here, where `native_edits` has no place for them. One output cap is sent.
    """
    body = {k: v for k, v in chat.items() if k not in edits.remove} | edits.set_fields
    for cap, other in (
        ("max_tokens", "max_completion_tokens"),
        ("max_completion_tokens", "max_tokens"),
    ):
        if cap in edits.set_fields and other not in edits.set_fields:
            body.pop(other, None)
    return body
