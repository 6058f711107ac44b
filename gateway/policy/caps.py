"""Output caps: the answer-length default and ceiling, in the field the backend reads.

A rule's `max_tokens` caps the answer. Where the backend counts thinking inside its
max-tokens field (vLLM, SGLang, Anthropic) the thinking budget is added on top, so a
thinking budget never eats the answer. A client's own value is taken as the backend
reads it (thinking included) and is only ever lowered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.backends import ANTHROPIC_DEFAULT_MAX_TOKENS
from gateway.policy.decision import Draft
from gateway.policy.schema import Family, MaxTokens

MAX_TOKENS = "max_tokens"
MAX_COMPLETION_TOKENS = "max_completion_tokens"


def output_field(family: Family, body: Mapping[str, Any], reasoning_model: bool) -> str:
    """The field that carries the output cap for this backend and body."""
    if family == "anthropic":
        return MAX_TOKENS
    if MAX_COMPLETION_TOKENS in body:
        return MAX_COMPLETION_TOKENS
    if family == "openai" and reasoning_model:
        return MAX_COMPLETION_TOKENS  # OpenAI's reasoning models refuse max_tokens
    return MAX_TOKENS


def _client_cap(body: Mapping[str, Any], field: str) -> tuple[int | None, str | None]:
    """The client's cap and the field it came in: the chosen field first, else the other."""
    other = MAX_TOKENS if field == MAX_COMPLETION_TOKENS else MAX_COMPLETION_TOKENS
    for name in (field, other):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value, name
    return None, None


def _policy_default(family: Family, limits: MaxTokens | None) -> int | None:
    if limits is not None and (limits.default or limits.ceiling):
        # With only a ceiling, the ceiling is the default: an unset cap is no cap at all.
        return limits.default or limits.ceiling
    return ANTHROPIC_DEFAULT_MAX_TOKENS if family == "anthropic" else None


def _model_limit(draft: Draft, capabilities: Mapping[str, Any], value: int) -> int:
    limit = capabilities.get("max_output_tokens")
    if isinstance(limit, int) and 0 < limit < value:
        draft.notes.append(f"output cap {value} lowered to the model's limit {limit}")
        return limit
    return value


def plan_output_cap(
    draft: Draft,
    family: Family,
    capabilities: Mapping[str, Any],
    limits: MaxTokens | None,
    thinking_tokens: int,
    *,
    strict: bool,
    rule: str,
) -> int | None:
    """Set, clamp or keep the output cap; return the value the backend will see."""
    field = output_field(family, draft.body, bool(capabilities.get("supports_reasoning")))
    asked, source = _client_cap(draft.body, field)
    ceiling = limits.ceiling if limits is not None else None
    wire_ceiling = ceiling + thinking_tokens if ceiling is not None else None
    if asked is None or source is None:
        default = _policy_default(family, limits)
        if default is None:
            return None
        if ceiling is not None:
            default = min(default, ceiling)
        value = _model_limit(draft, capabilities, default + thinking_tokens)
        draft.set(field, value)
        return value
    value = asked
    if wire_ceiling is not None and asked > wire_ceiling:
        if strict:
            draft.reject(
                source,
                f"{source} {asked} is over the ceiling of {wire_ceiling} set by rule '{rule}'; "
                f"send {source} of {wire_ceiling} or less",
            )
        draft.clamp(field, asked, wire_ceiling, f"ceiling of rule '{rule}'")
        value = _model_limit(draft, capabilities, wire_ceiling)
    if source != field:
        draft.drop(source)  # the value moves to the field this backend reads
    draft.set(field, value)
    return value
