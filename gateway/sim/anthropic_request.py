"""Parse, validate and render an Anthropic Messages request into cacheable blocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway import tokens
from gateway.sim.anthropic_cache import Breakpoint
from gateway.sim.errors import SimRequestError, describe_validation

MAX_BREAKPOINTS = 4
# Top-level fields of a Messages API request. Anthropic refuses any other one with
# "<field>: Extra inputs are not permitted" (an OpenAI `reasoning_effort`, `n`, ...).
MESSAGES_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "output_config",
        "output_format",
        "inference_geo",
        "speed",
        "cache_control",
    }
)
MIN_THINKING_BUDGET = 1024
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


class CacheControl(BaseModel):
    """An ephemeral cache breakpoint and its time to live."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class ThinkingEnabled(BaseModel):
    """Extended thinking with a token budget."""

    model_config = ConfigDict(extra="allow")

    type: Literal["enabled"]
    budget_tokens: int


class ThinkingOther(BaseModel):
    """Adaptive thinking (the model decides) or thinking switched off."""

    model_config = ConfigDict(extra="allow")

    type: Literal["adaptive", "disabled"]


Thinking = Annotated[ThinkingEnabled | ThinkingOther, Field(discriminator="type")]


class OutputConfig(BaseModel):
    """Output settings; effort scales how much the model thinks."""

    model_config = ConfigDict(extra="allow")

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class MessageParam(BaseModel):
    """One conversation turn: a string or a list of content blocks."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]  # system: on mid-conversation models
    content: str | list[dict[str, Any]]


class MessagesRequest(BaseModel):
    """The Messages API fields the simulator acts on; the API's other fields are ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    thinking: Thinking | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    cache_control: CacheControl | None = None
    output_config: OutputConfig | None = None
    speed: Literal["standard", "fast"] | None = None
    temperature: float | None = None
    top_k: int | None = None

    @property
    def effort(self) -> str:
        """Return the requested effort; Anthropic's default is high."""
        if self.output_config is not None and self.output_config.effort is not None:
            return self.output_config.effort
        return "high"


FAST_MODE_BETA = "fast-mode-2026-02-01"
"""The `anthropic-beta` value without which the Messages API knows no `speed` field."""


def parse_messages_request(body: bytes) -> MessagesRequest:
    """Decode and validate the body, raising Anthropic's 400s."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SimRequestError(400, f"There was an error parsing the body: {exc}") from exc
    if not isinstance(data, dict):
        raise SimRequestError(400, "The request body must be a JSON object.")
    extra = next((name for name in data if name not in MESSAGES_FIELDS), None)
    if extra is not None:
        raise SimRequestError(400, f"{extra}: Extra inputs are not permitted")
    try:
        request = MessagesRequest.model_validate(data)
    except ValidationError as exc:
        raise SimRequestError(400, describe_validation(exc)[0]) from exc
    _check_thinking(request)
    return request


def _check_thinking(request: MessagesRequest) -> None:
    """Apply Anthropic's extended-thinking constraints."""
    thinking = request.thinking
    if thinking is None or thinking.type == "disabled":
        return
    if isinstance(thinking, ThinkingEnabled):
        if thinking.budget_tokens < MIN_THINKING_BUDGET:
            raise SimRequestError(
                400,
                "thinking.enabled.budget_tokens: Input should be greater than or equal to "
                f"{MIN_THINKING_BUDGET}",
            )
        if thinking.budget_tokens >= request.max_tokens:
            raise SimRequestError(
                400,
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {_THINKING_DOCS}#max-tokens-and-context-window-size",
            )
    if request.temperature is not None and request.temperature != 1:
        raise SimRequestError(
            400,
            "`temperature` may only be set to 1 when thinking is enabled. "
            f"Please consult our documentation at {_THINKING_DOCS}",
        )
    if request.top_k is not None:
        raise SimRequestError(400, "`top_k` is not supported when thinking is enabled.")


@dataclass(frozen=True)
class RenderedBlocks:
    """Prompt token ids, the end position of each content block, and the breakpoints."""

    text: str
    token_ids: list[int]
    boundaries: list[int]
    breakpoints: list[Breakpoint]
    prefill: str | None


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _block_text(block: dict[str, Any]) -> str:
    """Render one content block; earlier turns' thinking is dropped from the context."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("thinking", "redacted_thinking"):
        return ""
    if kind == "tool_use":
        return _json({"tool_use": block.get("name"), "input": block.get("input")})
    if kind == "tool_result":
        inner = block.get("content")
        text = inner if isinstance(inner, str) else "".join(_block_text(b) for b in inner or [])
        return f"[tool_result {block.get('tool_use_id')}] {text}"
    if kind in ("image", "document"):
        return f"[{kind}]"
    return _json({k: v for k, v in block.items() if k != "cache_control"})


def _cache_control(block: dict[str, Any]) -> CacheControl | None:
    raw = block.get("cache_control")
    if raw is None:
        return None
    try:
        return CacheControl.model_validate(raw)
    except ValidationError as exc:
        raise SimRequestError(400, "cache_control: " + describe_validation(exc)[0]) from exc


_HEADERS = {"user": "\n\nHuman: ", "assistant": "\n\nAssistant: ", "system": "\n\nSystem: "}


def _blocks(request: MessagesRequest) -> list[tuple[str, dict[str, Any]]]:
    """Return (text, source block) in cache order: tools, system, then messages."""
    out = [
        (_json({k: v for k, v in t.items() if k != "cache_control"}), t)
        for t in request.tools or []
    ]
    system = request.system
    if isinstance(system, str):
        out.append(("System: " + system, {}))
    else:
        out += [("System: " + _block_text(b), b) for b in system or []]
    for message in request.messages:
        content = message.content
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        header = _HEADERS[message.role]
        for index, block in enumerate(parts):
            out.append(((header if index == 0 else "") + _block_text(block), block))
    return out


def _prefill(request: MessagesRequest) -> str | None:
    """Return the text of a trailing assistant message, which the model continues."""
    last = request.messages[-1]
    if last.role != "assistant":
        return None
    if isinstance(last.content, str):
        return last.content
    return "".join(_block_text(block) for block in last.content)


def render_blocks(request: MessagesRequest) -> RenderedBlocks:
    """Tokenize block by block, so breakpoints fall exactly on block edges."""
    token_ids: list[int] = []
    boundaries: list[int] = []
    breakpoints: list[Breakpoint] = []
    blocks = _blocks(request)
    for index, (text, source) in enumerate(blocks):
        token_ids += tokens.encode(text)
        boundaries.append(len(token_ids))
        control = _cache_control(source)
        if control is not None:
            breakpoints.append(Breakpoint(index, control.ttl))
    if request.cache_control is not None and not any(
        b.boundary == len(blocks) - 1 for b in breakpoints
    ):
        # Automatic caching puts one breakpoint on the last cacheable block.
        breakpoints.append(Breakpoint(len(blocks) - 1, request.cache_control.ttl))
    if len(breakpoints) > MAX_BREAKPOINTS:
        raise SimRequestError(
            400,
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(breakpoints)}.",
        )
    prefill = _prefill(request)
    texts = [text for text, _ in blocks]
    if prefill is None:
        texts.append("\n\nAssistant:")
        token_ids += tokens.encode(texts[-1])
    return RenderedBlocks("".join(texts), token_ids, boundaries, breakpoints, prefill)
