"""Stage 1: turn the raw body into a validated request, or a 400 that names the field.

`parse` does it in one go, for small bodies (the common case: no extra cost). For a body
over `OFF_LOOP_BYTES`, `parse_request` builds and validates it a slice of about a
millisecond at a time on the loop, with the native walk beside it (`parse_steps`), so a
32 MiB body of 466,000 messages never holds the loop (or, from a worker thread, the
interpreter lock) for the 0.2-0.6 s a single `orjson.loads` or pydantic call takes. The
result, and every error, is the same as `parse`'s: a body the slicer cannot reproduce
exactly (invalid JSON, too deep, NaN) is parsed whole, in a worker thread, for its error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Mapping
from typing import Any, get_args, get_type_hints

from pydantic import TypeAdapter, ValidationError

from gateway.errors import BodyTooLargeError, InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import OFF_LOOP_BYTES, RELEASE_BYTES, inline_bound, parses_inline
from gateway.prefix.locate import acyclic_list, native_step
from gateway.prefix.reuse import SegmentReuse
from gateway.rawjson import NATIVE, plain_messages, space_end
from gateway.schemas import sliced
from gateway.schemas.body import MAX_DEPTH, invalid_field, load_object
from gateway.schemas.chat import ChatRequest, Message, StreamOptions
from gateway.schemas.sliced import Offload, Steps, Unsliceable, load_sliced

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
# Stands in for the messages while the other fields are validated: always valid.
_PLACEHOLDER: dict[str, Any] = {"role": "user"}
_FIELDS = list(ChatRequest.model_fields)
# `Message`'s roles, exactly (a str subclass or another type never comes out of orjson).
_ROLES = frozenset(get_args(get_type_hints(Message)["role"]))
PLAIN_MESSAGES = 64
"""From this many messages on, plain ones are taken as they are (`_validated_plain`)."""


def check_size(length: int, limit: int) -> None:
    """Refuse a body over the configured limit before reading more of it."""
    if length > limit:
        raise BodyTooLargeError(
            f"request body is {length} bytes, over the limit of {limit} bytes "
            "(FAREBOX_MAX_BODY_BYTES)"
        )


def parse(ctx: RequestContext, reuse: SegmentReuse | None = None) -> None:
    """Parse and validate `ctx.raw_body` into `ctx.body` and `ctx.request`.

    With `reuse` (the prefix checker's), a task's step parses and validates only the
    messages its previous request did not end with, byte for byte (`_parse_reusing`), and
    a large body without a task parses only what its caller's previous one did not
    repeat (`_parse_sharing`).
    """
    if reuse is None or not (_parse_reusing(ctx, reuse) or _parse_sharing(ctx, reuse)):
        _parse_whole(ctx, reuse)


def _parse_whole(ctx: RequestContext, reuse: SegmentReuse | None, bound: int | None = None) -> None:
    raw = ctx.raw_body
    body = load_object(raw, MAX_DEPTH, bound) if len(raw) < UNTRACK_BYTES else _load(raw, bound)
    ctx.request = _validated(ctx, body, reuse)
    ctx.body = body


def _validated(
    ctx: RequestContext, body: dict[str, Any], reuse: SegmentReuse | None
) -> ChatRequest:
    """`ChatRequest.model_validate(body)`, or the 400 that names the field."""
    request = _validated_reusing(ctx, body, reuse) if reuse is not None else None
    if request is None:
        request = _validated_plain(body)
    if request is None:
        try:
            request = ChatRequest.model_validate(body)
        except ValidationError as exc:
            raise invalid_field(exc.errors(), body=body) from None
    return request


def message_key(headers: Mapping[str, str]) -> str:
    """Whose previous large body a body without a task is compared with: its credential's.

    The parse runs before the caller is known; any key would be exact (bodies are matched
    by their bytes), this one only finds the body most likely to repeat. Hashed: the
    credential itself is not kept.
    """
    credential = headers.get("authorization") or headers.get("x-api-key") or ""
    return f"k{hash(credential):x}"


def _parse_sharing(ctx: RequestContext, reuse: SegmentReuse) -> bool:
    """Parse a large body without a task, taking the run of messages it repeats of its
    credential's previous body (kept by `keep_messages`) from that body's parse; False
    (nothing set) where that cannot give exactly what `_parse_whole` gives.

    A fresh prompt (a new system prompt, then the conversation sent last time) repeats
    ~1,243 of its 1,245 messages, though not as a byte prefix: orjson built them all again
    (~1 ms per MB) and freeing them cost ~0.3-0.5 ms. `MessageReuse.run` finds the run
    (why a rest that parses makes it exact: see `gateway.prefix.message_reuse`); only the
    body without it is parsed, then the kept values go back in. The run's messages nest
    in the body as they did in the body they were parsed from, which passed the depth
    limit, so only the rest is checked for depth. Any error is left to the whole parse.
    """
    raw = ctx.raw_body
    if len(raw) < reuse.messages.min_bytes or ctx.headers.get("x-task-id"):
        return False
    run = reuse.messages.run(message_key(ctx.headers), raw)
    if run is None:
        return False
    try:
        body = load_object(raw[: run.start] + raw[run.end :], MAX_DEPTH)
    except InvalidRequestError:
        return False
    messages = body.get("messages")
    if type(messages) is not list or len(messages) != run.remaining:
        return False
    messages[run.index : run.index] = run.values
    ctx.request = _validated(ctx, body, None)
    ctx.body = body
    reuse.messages.shared(raw)
    return True


def keep_messages(ctx: RequestContext, reuse: SegmentReuse) -> None:
    """Keep a large body without a task and its parsed messages for its credential's
    next body's parse (`_parse_sharing`): only where nothing will change the messages."""
    messages = ctx.body.get("messages")
    if type(messages) is list and not ctx.headers.get("x-task-id"):
        reuse.messages.keep(message_key(ctx.headers), ctx.raw_body, messages)


UNTRACK_BYTES = 64 * 1024
"""From this size on, a body is parsed with the collector paused (`_load`)."""
_UNTRACK_ITEMS = native_step("untrack_items")


def _load(raw: bytes, bound: int | None) -> dict[str, Any]:
    """`load_object(raw, MAX_DEPTH, bound)` for a body of `UNTRACK_BYTES` and more, its
    messages out of cyclic GC.

    orjson's ~2,500 allocations for a 1 MB prompt's 1,245 messages set off 3-4 young
    collections inside the call, and the ~800 containers that CPython leaves tracked (lists,
    and the dicts that hold them) were walked by them and by the older ones after. A
    parsed value is a tree, so each message's dicts and lists can leave cyclic GC
    bottom-up (`_locate.untrack_items`), as CPython does with dicts of atoms; the collector
    is paused until then. The `messages` list and the body stay tracked, and a dict takes
    itself back into cyclic GC when given a tracked value. Only a cycle made later
    through one of the untracked lists would be kept, not freed: nothing puts anything
    but JSON values into a message's lists.
    """
    if _UNTRACK_ITEMS is None:
        return load_object(raw, MAX_DEPTH, bound)
    collecting = gc.isenabled()
    gc.disable()
    try:
        body = load_object(raw, MAX_DEPTH, bound)
        messages = body.get("messages")
        if type(messages) is list:
            _UNTRACK_ITEMS(messages)
    finally:
        if collecting:
            gc.enable()
    return body


def _parse_reusing(ctx: RequestContext, reuse: SegmentReuse) -> bool:
    """Parse a task's step taking the messages it repeats from its previous request's
    parse; False (nothing set) where that cannot give exactly what `_parse_whole` gives.

    A 1 MB agent step resends ~1,245 messages it sent before: orjson built them again
    (~1 ms), the collector walked the ~2,500 new containers (~0.3-0.9 ms) and freeing them
    cost as much again. A message's parsed value is a function of its bytes, and
    `SegmentReuse` matches bytes exactly, so only the body with those messages cut out is
    parsed, and they are put back in front of the new ones: the same values, shared with
    the previous request (kept only where nothing changes them, see `SegmentReuse.split`).
    Only the rest is checked for depth: the repeated messages nest in the body as they
    did in the request they were parsed from, which passed. Any error, and a body too
    large to parse here, is left to the whole parse.
    """
    task, raw = ctx.headers.get("x-task-id"), ctx.raw_body
    if not task or len(raw) > RELEASE_BYTES:
        return False
    repeat = reuse.repeated(f"task:{task}", raw)
    if repeat is None or repeat.parsed is None or repeat.validated is None:
        return False
    rest = _without_repeat(raw, repeat.value_start, repeat.end)
    if rest is None or (len(rest) > OFF_LOOP_BYTES and not parses_inline(rest)):
        return False
    try:  # the repeated messages nest as in the body they were parsed from, which passed
        body = load_object(rest, MAX_DEPTH)
    except InvalidRequestError:
        return False
    messages = body.get("messages")
    if type(messages) is not list:
        return False
    messages[0:0] = repeat.parsed[: repeat.count]
    request = _validated_reusing(ctx, body, reuse)
    if request is None:  # an error, or nothing to reuse: the whole parse says which
        return False
    ctx.request, ctx.body = request, body
    reuse.messages.shared(raw)
    return True


def _without_repeat(raw: bytes, value_start: int, end: int) -> bytes | None:
    """`raw` without the messages from its `messages` array's opening to `end`, and the
    comma after them: valid JSON exactly when `raw` is, given those messages were (else
    None: `[..., ]` would become `[]`)."""
    after = space_end(raw, end)
    if raw.startswith(b",", after):
        after += 1
        if raw.startswith(b"]", space_end(raw, after)):
            return None
    elif not raw.startswith(b"]", after):
        return None
    return raw[: value_start + 1] + raw[after:]


def _validated_plain(body: dict[str, Any]) -> ChatRequest | None:
    """`ChatRequest.model_validate(body)` for a body of plain messages, with the messages
    taken as they are; None: validate it whole.

    A message whose role is one of `Message`'s and whose content is a string, null, absent
    or a list of objects is valid, and validating it gives an equal dict (other key order:
    nothing reads them but their count): pydantic's copies of a 1 MB prompt's 1,245
    messages cost ~0.5 ms, and as much again to collect and free; checking them in Python
    cost ~0.35 ms, natively (`plain_messages`) ~0.03 ms. Where the other fields are
    trivially valid too, the request is built without pydantic (`_built`); else, for a
    long conversation, pydantic validates the body with one placeholder message. Any
    other message, and any error, is left to the whole validation.
    """
    messages = body.get("messages")
    if type(messages) is not list or not messages or not plain_messages(messages, _ROLES):
        return None
    built = _built(body, messages)
    if built is not None or len(messages) < PLAIN_MESSAGES:
        return built
    try:
        rest = ChatRequest.model_validate({**body, "messages": [_PLACEHOLDER]})
    except ValidationError:
        return None
    return _with_messages(rest, list(messages))


# How `_built` checks each of `ChatRequest`'s fields (each may also be null but `model`).
_NAME, _MESSAGES_FIELD, _BOOL, _POSITIVE, _INT, _OBJECT, _STR, _OPTIONS = range(8)
_KINDS = {
    "model": _NAME,
    "messages": _MESSAGES_FIELD,
    "stream": _BOOL,
    "stream_options": _OPTIONS,
    "max_tokens": _POSITIVE,
    "max_completion_tokens": _POSITIVE,
    "n": _INT,
    "metadata": _OBJECT,
    "service_tier": _STR,
    "reasoning_effort": _STR,
}
# `ChatRequest`'s fields in order, with their defaults (`model` and `messages` have none).
_DEFAULTS: dict[str, Any] = {
    name: None if info.is_required() else info.default
    for name, info in ChatRequest.model_fields.items()
}
BUILDS = (
    tuple(_DEFAULTS) == tuple(_KINDS)
    and not ChatRequest.__pydantic_post_init__
    and not ChatRequest.__private_attributes__
    and not any(
        getattr(ChatRequest.__pydantic_decorators__, info.name)
        for info in dataclasses.fields(ChatRequest.__pydantic_decorators__)
    )
)
"""Whether `_built` knows `ChatRequest` (its fields, no validators): a changed model is
validated by pydantic until `_KINDS` says how to check its fields."""
_set_attribute = object.__setattr__


def _built(body: dict[str, Any], messages: list[Any]) -> ChatRequest | None:
    """`ChatRequest.model_validate(body)` built directly, for a body (as orjson makes it)
    whose `messages` are plain (`plain_messages`) and whose other fields are each of the
    one type pydantic takes as it is; None: let pydantic validate it.

    What pydantic gives for such a body is known: each field's value (its default when
    absent), `messages` a new list of equal dicts, `metadata` an equal new dict,
    `stream_options` a `StreamOptions`, the other keys as extras. Building that is ~1 us
    against pydantic's ~3 us for a one-message request (c=64 profile: model_validate 1.4%
    of the gateway's CPU). Equality, fields set and extras are checked against pydantic's
    for many bodies by tests/unit/test_parse_fast.py.
    """
    if not BUILDS:
        return None
    values = _DEFAULTS.copy()
    extra: dict[str, Any] = {}
    kinds = _KINDS
    for key, value in body.items():
        kind = kinds.get(key)
        if kind is None:
            extra[key] = value
            continue
        if kind == _NAME:
            if type(value) is not str or not value:
                return None
        elif kind == _MESSAGES_FIELD:
            value = list(messages)
        elif value is None:
            pass
        elif kind == _POSITIVE:
            if type(value) is not int or value < 1:
                return None
        elif kind == _BOOL:
            if value is not True and value is not False:
                return None
        elif kind == _STR:
            if type(value) is not str:
                return None
        elif kind == _INT:
            if type(value) is not int:
                return None
        elif kind == _OBJECT:
            if type(value) is not dict:
                return None
            value = dict(value)  # pydantic's dict[str, Any] is a new dict (orjson: str keys)
        else:  # _OPTIONS
            if type(value) is not dict:
                return None
            try:
                value = StreamOptions.model_validate(value)
            except ValidationError:
                return None
        values[key] = value
    if values["model"] is None or values["messages"] is None:
        return None  # required: pydantic names what is missing
    request = ChatRequest.__new__(ChatRequest)
    _set_attribute(request, "__dict__", values)
    _set_attribute(request, "__pydantic_fields_set__", set(body))  # extras too
    _set_attribute(request, "__pydantic_extra__", extra)
    _set_attribute(request, "__pydantic_private__", None)
    return request


def _with_messages(rest: ChatRequest, messages: list[Any]) -> ChatRequest:
    """`rest.model_copy(update={"messages": messages})`, without pydantic's generic copy."""
    request = ChatRequest.__new__(ChatRequest)
    _set_attribute(request, "__dict__", {**rest.__dict__, "messages": messages})
    _set_attribute(request, "__pydantic_fields_set__", {*rest.__pydantic_fields_set__})
    _set_attribute(request, "__pydantic_extra__", dict(rest.__pydantic_extra__ or {}))
    _set_attribute(request, "__pydantic_private__", None)
    return request


def _validated_rest(body: dict[str, Any], messages: list[Any]) -> ChatRequest:
    """`body` validated with `messages` (valid already) in place of its own: built
    directly where `_built` can, else by pydantic with a placeholder message."""
    built = _built(body, [_PLACEHOLDER])
    if built is not None:
        _set_attribute(built, "__dict__", {**built.__dict__, "messages": messages})
        return built
    rest = ChatRequest.model_validate({**body, "messages": [_PLACEHOLDER]})
    return _with_messages(rest, messages)


def _validated_reusing(
    ctx: RequestContext, body: dict[str, Any], reuse: SegmentReuse
) -> ChatRequest | None:
    """`ChatRequest.model_validate(body)`, with the leading messages that repeat the task's
    previous request taken as that request validated them; None: validate it whole.

    An agent step resends its whole history: validating 1,245 messages again cost ~0.5 ms
    and ~3,000 new objects for the collector (~0.5 ms more) per 1 MB step. A message's
    validated value is a function of its bytes, and `SegmentReuse` matches bytes exactly.
    The values are shared between requests, so only bodies up to `RELEASE_BYTES`, which
    nothing takes apart when they end (`release`), and nothing may change them. The new
    messages are taken as they are where they are plain (`plain_messages`). Any error is
    left to the whole validation, which names the field pydantic reports first.
    """
    task, messages = ctx.headers.get("x-task-id"), body.get("messages")
    if not task or not isinstance(messages, list) or len(ctx.raw_body) > RELEASE_BYTES:
        return None
    known = reuse.validated_prefix(f"task:{task}", ctx.raw_body)
    if not known or len(known) > len(messages):
        return None
    new = messages[len(known) :]
    try:
        tail = new if plain_messages(new, _ROLES) else _MESSAGES.validate_python(new)
        return _validated_rest(body, [*known, *tail])
    except ValidationError:
        return None


async def parse_request(ctx: RequestContext, reuse: SegmentReuse | None = None) -> None:
    """`parse`, on the loop for bodies of a few ms, a slice at a time for larger ones.

    A body over `OFF_LOOP_BYTES` that `parses_inline` (a 1 MB agent step: ~2 ms of orjson,
    the depth check and pydantic) is parsed whole too: slicing it costs more (~2.8 ms).
    """
    if reuse is not None and (_parse_reusing(ctx, reuse) or _parse_sharing(ctx, reuse)):
        return None
    if len(ctx.raw_body) <= OFF_LOOP_BYTES:
        return _parse_whole(ctx, reuse)
    inline, bound = inline_bound(ctx.raw_body)
    if inline:
        return _parse_whole(ctx, reuse, bound)
    if not NATIVE:
        return await asyncio.to_thread(parse, ctx)
    steps = parse_steps(ctx.raw_body)
    sent: Any = None
    try:
        while True:
            request = steps.send(sent)
            if isinstance(request, Offload):
                sent = await asyncio.to_thread(request.call)
            else:
                sent = None
                await asyncio.sleep(0)  # let the loop's other work run between slices
    except StopIteration as done:
        ctx.body, ctx.request = done.value
    except Unsliceable:
        await asyncio.to_thread(parse, ctx)  # raises the error `parse` gives


def parse_steps(raw: bytes) -> Steps[tuple[dict[str, Any], ChatRequest]]:
    """What `parse` computes, a slice at a time (see `gateway.schemas.sliced`)."""
    body = yield from load_sliced(raw, MAX_DEPTH)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body, _validate(body)  # a refusal, or a body whose bulk is elsewhere
    rest: ChatRequest | None = None
    rest_errors: list[Mapping[str, Any]] = []
    try:
        rest = ChatRequest.model_validate({**body, "messages": [_PLACEHOLDER]})
    except ValidationError as exc:
        rest_errors = list(exc.errors())
        if _field_order(rest_errors[0]) < _FIELDS.index("messages"):  # reported first
            raise invalid_field(rest_errors, body=body) from None
    validated = yield from _validate_messages(messages, body, rest_errors)
    assert rest is not None  # else `_validate_messages` raised the first error
    return body, rest.model_copy(update={"messages": validated})


def _validate(body: dict[str, Any]) -> ChatRequest:
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_field(exc.errors(), body=body) from None


def _validate_messages(
    messages: list[Any], body: dict[str, Any], rest_errors: list[Mapping[str, Any]]
) -> Steps[list[Message]]:
    """The messages validated a slice at a time; the 400 pydantic's whole pass would give."""
    validated: list[Message] = acyclic_list()  # as long as the messages: see acyclic_list
    step = sliced.SLICE_ITEMS
    for start in range(0, len(messages), step):
        try:
            validated += _MESSAGES.validate_python(messages[start : start + step])
        except ValidationError as exc:
            raise invalid_field(_first(rest_errors, exc.errors(), start), body=body) from None
        yield None
    if rest_errors:
        raise invalid_field(_first(rest_errors, [], 0), body=body)
    return validated


def _first(
    rest: list[Mapping[str, Any]], message_errors: list[Any], offset: int
) -> list[Mapping[str, Any]]:
    """The error pydantic reports first: by field order, so `model` before `messages`."""
    moved = [
        {**e, "loc": ("messages", offset + e["loc"][0], *e["loc"][1:])} for e in message_errors
    ]
    errors = [*rest, *moved[:1]]
    errors.sort(key=_field_order)  # stable: each field's own errors keep their order
    return errors[:1]


def _field_order(error: Mapping[str, Any]) -> int:
    loc = error.get("loc") or ("",)
    return _FIELDS.index(loc[0]) if loc[0] in _FIELDS else len(_FIELDS)
