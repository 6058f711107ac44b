"""Bring a reply or stream chunk to OpenAI's published schema, changing only what breaks it.

OpenAI's OpenAPI document requires some fields even when they are null (a reply's
`choices[].logprobs`, `message.content` and `message.refusal`; a chunk's
`choices[].finish_reason`) and forbids null in others (`system_fingerprint`,
`message.annotations`, `function_call`, `tool_calls`). vLLM and SGLang send the second
kind as null; litellm's objects, once dumped, carry nulls everywhere. Pure functions: the
adapters call them, `tests/conformance` checks the result against the vendored schema.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from gateway.compact_patch import patch_compact
from gateway.rawjson import RawJsonError, patch_object

# Per level: fields that must be present (null when the upstream had nothing), and
# fields OpenAI's schema types without null (dropped when null).
REPLY_CHOICE_REQUIRED = ("logprobs",)
MESSAGE_REQUIRED = ("content", "refusal")
MESSAGE_NOT_NULL = ("role", "annotations", "function_call", "tool_calls")
CHUNK_CHOICE_REQUIRED = ("finish_reason",)
DELTA_NOT_NULL = ("role", "function_call", "tool_calls")
REPLY_NOT_NULL = ("system_fingerprint", "usage")
CHUNK_NOT_NULL = ("system_fingerprint", "obfuscation")
# Anthropic's `usage.service_tier` values in OpenAI's `service_tier` vocabulary.
ANTHROPIC_TIER_NAMES = {"standard": "default", "priority": "priority"}


def without_nulls(payload: Any, drop_keys: Iterable[str] = ()) -> Any:
    """`payload` with every null member, and every member named in `drop_keys`, removed."""
    drop = frozenset(drop_keys)
    if isinstance(payload, dict):
        return {
            k: without_nulls(v, drop) for k, v in payload.items() if v is not None and k not in drop
        }
    if isinstance(payload, list):
        return [without_nulls(v, drop) for v in payload]
    return payload


def conforming_reply(payload: dict[str, Any]) -> dict[str, Any]:
    """A whole `chat.completion` reply as OpenAI's schema has it."""
    reply = _drop_null(payload, REPLY_NOT_NULL)
    choices = reply.get("choices")
    if isinstance(choices, list):
        reply["choices"] = [_reply_choice(c) if isinstance(c, dict) else c for c in choices]
    return reply


def with_tier_echo(reply: dict[str, Any]) -> dict[str, Any]:
    """`reply` with OpenAI's `service_tier` echo, from Anthropic's `usage.service_tier`.

    OpenAI's reply names the tier that served a request that set `service_tier`; a
    Messages API reply says it only in `usage`. A tier OpenAI has no name for is not echoed.
    """
    usage = reply.get("usage")
    served = usage.get("service_tier") if isinstance(usage, dict) else None
    return echo_tier(reply, served)


def echo_tier(payload: dict[str, Any], served: Any) -> dict[str, Any]:
    """`payload` (a reply or a stream chunk) with `service_tier` in OpenAI's words for
    Anthropic's `served`, unless it has one already or OpenAI has no name for it."""
    echo = ANTHROPIC_TIER_NAMES.get(served) if isinstance(served, str) else None
    if echo is None or isinstance(payload.get("service_tier"), str):
        return payload
    return {**payload, "service_tier": echo}


def conforming_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """A `chat.completion.chunk` as OpenAI's schema has it."""
    chunk = _drop_null(payload, CHUNK_NOT_NULL)
    choices = chunk.get("choices")
    if isinstance(choices, list):
        chunk["choices"] = [_chunk_choice(c) if isinstance(c, dict) else c for c in choices]
    return chunk


def conformed_reply_bytes(body: bytes, payload: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """A relayed reply's bytes and payload, with only the fields that break the schema changed."""
    body, payload, _ = conformed_reply(body, payload)
    return body, payload


def conformed_reply(body: bytes, payload: dict[str, Any]) -> tuple[bytes, dict[str, Any], bool]:
    """`conformed_reply_bytes`, and whether the bytes are `orjson.dumps` of the payload
    (rendered here: a later patch of the same reply need not render it again to know)."""
    set_fields, remove = reply_fixes(payload)
    if not set_fields and not remove:
        return body, payload, False
    fixed = dict(payload)  # each kept or set member in its place, as a comprehension would
    for key in remove:
        del fixed[key]
    fixed.update(set_fields)  # (a dict comprehension with a `get` per member: ~2 us more)
    fast = patch_compact(body, payload, set_fields, remove)  # same bytes, no member scan
    if fast is not None:
        return fast, fixed, True  # `fixed` rendered: what `patch_compact` dumped
    try:
        return patch_object(body, set_fields, remove, trusted=True), fixed, False
    except RawJsonError:  # parsed, yet not patchable: render it whole
        return orjson.dumps(fixed), fixed, True


def reply_fixes(payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`top_level_edits(payload, conforming_reply(payload))`, without building a conforming
    copy of a reply that needs none, or comparing the two.

    Only `choices` is ever set (when a choice breaks the schema), only the null members of
    `REPLY_NOT_NULL` are removed; a whole reply is read once per request at concurrency 1.
    """
    remove = [k for k in REPLY_NOT_NULL if payload.get(k, ...) is None]  # 2 keys, not all
    if len(remove) > 1:  # in the reply's order, as a walk over its members gives them
        remove = [k for k in payload if k in remove]
    choices = payload.get("choices")
    if isinstance(choices, list):
        for choice in choices:  # a loop, not any() over a generator: one frame less
            if _choice_breaks(choice):
                fixed = [_reply_choice(c) if isinstance(c, dict) else c for c in choices]
                return {"choices": fixed}, remove
    return {}, remove


def _choice_breaks(choice: Any) -> bool:
    """Whether `_reply_choice` would change `choice` (a key to add, a null to drop)."""
    if not isinstance(choice, dict):
        return False
    if "logprobs" not in choice:  # REPLY_CHOICE_REQUIRED
        return True
    message = choice.get("message")
    if not isinstance(message, dict):
        return False
    if "content" not in message or "refusal" not in message:  # MESSAGE_REQUIRED
        return True
    for key in MESSAGE_NOT_NULL:  # noqa: SIM110 - a loop: no generator made per reply
        if key in message and message[key] is None:
            return True
    return False


def top_level_edits(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The top-level fields to set and to remove that turn `before` into `after`."""
    changed = {k: v for k, v in after.items() if k not in before or before[k] != v}
    return changed, [k for k in before if k not in after]


def _reply_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """`choice` with its required keys (null, last) and without its forbidden nulls.

    What `_with_keys(_drop_null(...))` gives, built by copying and editing the copy: a
    deletion keeps the other members' order and a missing key goes last, in the order of
    the tuple, as the merge of two dicts puts them.
    """
    fixed = dict(choice)
    for key in REPLY_CHOICE_REQUIRED:
        if key not in fixed:
            fixed[key] = None
    message = fixed.get("message")
    if isinstance(message, dict):
        kept = dict(message)
        for key in MESSAGE_NOT_NULL:
            if key in kept and kept[key] is None:
                del kept[key]
        for key in MESSAGE_REQUIRED:
            if key not in kept:
                kept[key] = None
        fixed["message"] = kept
    return fixed


def _chunk_choice(choice: dict[str, Any]) -> dict[str, Any]:
    fixed = _with_keys(choice, CHUNK_CHOICE_REQUIRED)
    delta = fixed.get("delta")
    if isinstance(delta, dict):
        fixed["delta"] = _drop_null(delta, DELTA_NOT_NULL)
    return fixed


def _with_keys(obj: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """`obj` with each of `keys` present, null where it was missing."""
    return {**obj, **{k: None for k in keys if k not in obj}}


def _drop_null(obj: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """`obj` without those of `keys` whose value is null."""
    names = frozenset(keys)
    return {k: v for k, v in obj.items() if not (k in names and v is None)}
