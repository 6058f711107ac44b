"""`/v1/completions` and `/v1/embeddings` requests as the pipeline sees them.

The stages read chat-completions fields, so `ctx.body` is a chat-shaped view of the
request (`policy_view`): the prompt (or the inputs) as one user message, the output cap
as `max_tokens`. It is what identity, entitlements, the policy and the quota read, never
what is sent. The client's own body is `ctx.native`; the stages' edits are mapped back
onto it (`native_edits`) and applied to the client's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from gateway.pipeline.context import BodyEdits, RequestContext
from gateway.schemas.body import invalid_field, load_object

Kind = Literal["completion", "embedding"]
DEFAULT_MAX_TOKENS = 16
"""OpenAI's (and vLLM's) `max_tokens` when a completion names none: its worst case."""
# Fields of the same name in the view and the native body that a stage may set or remove.
_SAME_NAME = ("model", "metadata", "service_tier", "user")
_CAPS = ("max_completion_tokens", "max_tokens")
_TOKEN_IDS = "<token ids>"


class CompletionRequest(BaseModel):
    """The fields of `POST /v1/completions` the pipeline reads; the rest passes through."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    prompt: str | list[Any]
    max_tokens: StrictInt | None = Field(default=None, ge=0)
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class EmbeddingRequest(BaseModel):
    """The fields of `POST /v1/embeddings` the pipeline reads; the rest passes through."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[Any]


@dataclass(slots=True)
class CompletionsContext(RequestContext):
    """A `RequestContext` whose request is a text completion or an embeddings request."""

    kind: Kind = "completion"
    native: dict[str, Any] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        return self.kind == "completion" and self.native.get("stream") is True

    @property
    def client_wants_usage_chunk(self) -> bool:
        options = self.native.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True


def parse_kind(ctx: CompletionsContext) -> None:
    """Parse the body into `ctx.native` and the view `ctx.body`, or a 400 naming the field."""
    body = load_object(ctx.raw_body)
    schema = CompletionRequest if ctx.kind == "completion" else EmbeddingRequest
    try:
        schema.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None
    ctx.native = body
    ctx.body = policy_view(body, ctx.kind)


def prompt_text(value: Any) -> str:
    """The text of a prompt or input: strings joined; token ids stand in as a placeholder."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(prompt_text(item) for item in value if not isinstance(item, int)) or (
            _TOKEN_IDS if value else ""
        )
    return ""


def policy_view(native: dict[str, Any], kind: Kind) -> dict[str, Any]:
    """The request in chat terms, for identity, the policy and the quota (never sent)."""
    view: dict[str, Any] = {k: native[k] for k in _SAME_NAME if k in native}
    source = native.get("prompt") if kind == "completion" else native.get("input")
    view["messages"] = [{"role": "user", "content": prompt_text(source)}]
    if kind == "completion":
        cap = native.get("max_tokens")
        view["max_tokens"] = DEFAULT_MAX_TOKENS if cap is None else cap
        view["stream"] = native.get("stream", False)
    else:
        view["max_tokens"] = 0  # an embedding produces no output tokens
    return view


def native_edits(edits: BodyEdits, native: dict[str, Any], kind: Kind) -> BodyEdits:
    """The stages' chat-shaped edits as edits of the native body.

    Same-name fields are edited as they are; an output cap becomes `max_tokens` on a
    completion (an embedding has none); `stream_options` only on a completion stream;
    chat-only fields (`reasoning_effort`, `thinking`, ...) have no place here.
    """
    out = BodyEdits()
    for name in _SAME_NAME:
        if name in edits.set_fields:
            out.set_fields[name] = edits.set_fields[name]
        elif name in edits.remove and name in native:
            out.remove.add(name)
    if kind != "completion":
        return out
    if "stream_options" in edits.set_fields:
        out.set_fields["stream_options"] = edits.set_fields["stream_options"]
    caps = [edits.set_fields.get(cap) for cap in _CAPS]
    given = [cap for cap in caps if isinstance(cap, int) and not isinstance(cap, bool)]
    asked = native.get("max_tokens")
    cap = min(given) if given else None
    if cap is not None and cap != (DEFAULT_MAX_TOKENS if asked is None else asked):
        out.set_fields["max_tokens"] = cap  # the smallest cap a stage set wins
    return out
