"""Parse, validate and render an OpenAI chat completion request the way vLLM does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.sim.config import SimModel
from gateway.sim.errors import SimRequestError, describe_validation

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
# OpenAI refuses any other value (ultrafast exists on a few hosted models, none simulated).
ServiceTier = Literal["auto", "default", "flex", "scale", "priority", "fast"]
# Qwen3-style templates prefill an empty think block when thinking is switched off.
EMPTY_THINK = "<think>\n\n</think>\n\n"


class StreamOptions(BaseModel):
    """vLLM's stream_options; include_usage defaults to true once the object is sent."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ChatRequest(BaseModel):
    """The fields of a chat completion request the simulator acts on; others are ignored."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    seed: int | None = None
    service_tier: ServiceTier | None = None
    reasoning_effort: Effort | None = None
    thinking_token_budget: int | None = None
    include_reasoning: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    cache_salt: str | None = None
    custom_params: dict[str, Any] | None = None

    @property
    def output_limit(self) -> int | None:
        """Return the requested output cap; max_completion_tokens wins, as in vLLM."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens

    @property
    def echoed_tier(self) -> str:
        """Return the service_tier to report: auto or absent means default; fast is priority."""
        if self.service_tier in (None, "auto"):
            return "default"
        return "priority" if self.service_tier == "fast" else self.service_tier

    @property
    def hard_thinking_budget(self) -> int | None:
        """A per-request budget an engine can hold: vLLM's field, or SGLang strict thinking's.

        `chat_template_kwargs.thinking_budget` is not one: only a chat template reads it.
        """
        if self.thinking_token_budget is not None:
            return self.thinking_token_budget
        value = (self.custom_params or {}).get("thinking_budget")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def thinking_switched_on(self) -> bool:
        """Return whether the request leaves thinking on (chat_template_kwargs, effort none)."""
        kwargs = self.chat_template_kwargs or {}
        for key in ("enable_thinking", "thinking"):
            if kwargs.get(key) is False:
                return False
        return self.reasoning_effort != "none"


def parse_chat_request(body: bytes) -> ChatRequest:
    """Decode and validate the body, raising vLLM's 400s."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(400, f"JSON decode error: {exc}", kind="Bad Request") from exc
    if not isinstance(data, dict):
        raise SimRequestError(400, "Request body must be a JSON object.", kind="Bad Request")
    _check_raw(data)
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        message, param = describe_validation(exc)
        raise SimRequestError(400, message, kind="Bad Request", param=param) from exc


def _check_raw(data: dict[str, Any]) -> None:
    """Apply vLLM's before-validators, which see the raw JSON."""
    if data.get("stream_options") and not data.get("stream"):
        raise SimRequestError(
            400,
            "Stream options can only be defined when `stream=True`.",
            kind="Bad Request",
            param="stream_options",
        )
    if data.get("tools") == []:
        raise SimRequestError(
            400,
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            kind="Bad Request",
            param="tools",
        )
    if data.get("continue_final_message") and data.get("add_generation_prompt", True):
        raise SimRequestError(
            400,
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            kind="Bad Request",
        )


def check_supported(request: ChatRequest, model: SimModel) -> None:
    """Refuse what the served model or the simulator cannot do."""
    if request.n not in (None, 1):
        raise SimRequestError(400, "The simulator only supports n=1.", param="n")
    limit = request.output_limit
    if limit is not None and limit < 1:
        raise SimRequestError(
            400, f"max_tokens must be at least 1, got {limit}.", param="max_tokens"
        )
    if request.continue_final_message:
        if not model.supports_continue_final_message:
            raise SimRequestError(
                400,
                f"Model {model.name} does not support `continue_final_message`.",
                param="continue_final_message",
            )
        if request.messages[-1].get("role") != "assistant":
            raise SimRequestError(
                400,
                "`continue_final_message` needs the last message to be an assistant message.",
                param="messages",
            )


def content_text(content: Any) -> str:
    """Flatten message content: strings as is, text parts joined, other parts as placeholders."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and part.get("type", "text") == "text":
                pieces.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                pieces.append(f"<{part.get('type')}>")
        return "".join(pieces)
    return str(content)


def _render_message(message: dict[str, Any]) -> str:
    text = content_text(message.get("content"))
    if message.get("tool_calls"):
        text += _json(message["tool_calls"])
    if message.get("role") == "tool" and message.get("tool_call_id"):
        text = f"[{message['tool_call_id']}] {text}"
    return f"<|im_start|>{message.get('role', 'user')}\n{text}"


def _json(value: Any) -> str:
    # In the client's key order, as a chat template renders it: a tool schema with its
    # keys reordered is another prompt, so a prefix-cache miss (as on vLLM and OpenAI).
    return orjson.dumps(value).decode()


@dataclass(frozen=True)
class RenderedPrompt:
    """The templated prompt, and the assistant text being continued if any."""

    text: str
    continuation: str | None


def render_prompt(request: ChatRequest, model: SimModel) -> RenderedPrompt:
    """Apply a ChatML-like template: tools, messages, then the generation prompt."""
    parts = []
    if request.tools:
        parts.append(f"<|im_start|>system\n# Tools\n{_json(request.tools)}<|im_end|>\n")
    last = len(request.messages) - 1
    for index, message in enumerate(request.messages):
        rendered = _render_message(message)
        if index == last and request.continue_final_message:
            parts.append(rendered)
            return RenderedPrompt("".join(parts), content_text(message.get("content")))
        parts.append(rendered + "<|im_end|>\n")
    if request.add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
        if model.thinking and not request.thinking_switched_on():
            parts.append(EMPTY_THINK)
    return RenderedPrompt("".join(parts), None)
