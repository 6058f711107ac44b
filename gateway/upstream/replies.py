"""Read an upstream's reply, whole or one SSE event at a time, or refuse it as malformed.

The gateway relays OpenAI's chat-completion shape, so only the parts it promises its
clients are checked: the payload is a JSON object, `choices` a list of objects, each
`message` or `delta` an object, `usage` an object. Anything else is an
`UpstreamProtocolError` (a 502 that counts against the upstream), raised here, once,
instead of a `KeyError` deep in metering. Fields the gateway does not read pass unchecked.
An error event inside a stream becomes the error it reports (`error_in_chunk`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from gateway.errors import UpstreamProtocolError, UpstreamStatusError
from gateway.upstream import failures
from gateway.upstream.sse import CR, DONE, event_data

PlainEvent = Callable[[bytes], tuple[str, str | None] | None]
_LF = ord("\n")


def _native_plain_event() -> PlainEvent | None:
    if os.environ.get("FAREBOX_STREAM_NATIVE", "1") == "0":  # off on purpose: same results
        return None
    try:
        from gateway.upstream._plain_event import plain_event
    except ImportError:  # built without a C compiler: every event takes the Python path
        return None
    return plain_event


PLAIN_EVENT: PlainEvent | None = _native_plain_event()
"""`plain_event(event)`: a plain content chunk's `(content, service_tier)` in one native pass.

For an event that is one `data: {...}` line whose chunk `plain_content` would call plain,
it gives that content and the chunk's `service_tier` (None unless a string), exactly as
`line_data`, `read_chunk` and `chunk.get("service_tier")` read them, without building the
chunk; for every other event (a finish reason, usage, an error, `[DONE]`, a malformed or
unusual event) None, and the Python path reads it as before. The grammar it accepts is
no wider than orjson's (gateway/upstream/_plain_event.c says how). None here: not built.
"""


def reply_object(body: bytes, where: str) -> dict[str, Any]:
    """A whole `chat.completion` reply, checked."""
    payload = _json_object(body, where, "reply")
    if not isinstance(payload.get("choices"), list):
        raise UpstreamProtocolError(f"upstream {where} sent a reply with no `choices` list")
    _check_shape(payload, "message", where)
    return payload


def chunk_object(event: bytes, where: str) -> dict[str, Any] | None:
    """A streamed `chat.completion.chunk`, checked; None for comments, `[DONE]`, empty data."""
    return chunk_from_data(event_data(event), where)


def chunk_from_data(data: bytes | None, where: str) -> dict[str, Any] | None:
    """`chunk_object` of an event whose data (`event_data`) was already taken."""
    if data is None or not data.strip() or data.strip() == DONE:
        return None
    payload = _json_object(data, where, "stream event")
    _check_shape(payload, "delta", where)
    return payload


def read_chunk(data: bytes | None, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """`chunk_from_data` and the chunk's `plain_content`; a plain chunk's shape is that check."""
    if data is None or (data[:1] != b"{" and (not data.strip() or data.strip() == DONE)):
        return None, None
    payload = _json_object(data, where, "stream event")
    content = plain_content(payload)
    if content is None:
        _check_shape(payload, "delta", where)
    return payload, content


def line_data(event: bytes) -> bytes | None:
    """The data of an event that is one `data: ` line and its blank line, else None.

    Nearly every event of a stream has this shape; its data is a slice, where `event_data`
    splits the event into lines. Anything else (several lines, a `\r`, a comment, no blank
    line) is None: read it with `event_data`, which gives the same data for this shape.
    """
    # The first LF is the blank line's: the event's only two LFs end it (`find`, which
    # stops there, for `count(b"\n") == 2`, which read every byte, 2-3x the time here).
    simple = event[:6] == b"data: " and event[-2:] == b"\n\n" and event.find(_LF) == len(event) - 2
    # `CR not in`, an int: `bytes in bytes` on CPython 3.11 first tries the needle as an
    # int and raises and clears a TypeError (~0.7 µs); an int needle is one `memchr`.
    return event[6:-2] if simple and CR not in event else None


def plain_content(chunk: dict[str, Any]) -> str | None:
    """The content of a chunk that carries one delta with content and nothing else to meter.

    None for any other chunk: usage, an error, a finish reason, reasoning, tool calls, no
    choice or several, or a delta that is not an object. Such a chunk goes through the whole
    check (`error_in_chunk`, `Meter.observe_chunk`); for this one the meter needs only its
    content ("" when it has none, or content that is not a string) and its `service_tier`
    (OpenAI and the simulator put one in every chunk).
    """
    if "usage" in chunk or "error" in chunk:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or "tool_calls" in delta:
        return None
    if "reasoning" in delta or "reasoning_content" in delta:
        return None
    content = delta.get("content")
    return content if type(content) is str else ""


def error_in_chunk(
    payload: dict[str, Any], where: str, secrets: Iterable[str | None] = ()
) -> UpstreamStatusError | None:
    """The error an upstream reported inside its stream (vLLM and SGLang do), as ours.

    Relayed as it came, such an event would end the client's stream with the upstream's
    error but leave a row that says 200; as an exception it ends the stream the usual way.
    """
    error = payload.get("error")
    if not error or payload.get("choices"):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code <= 599 else 502
    return failures.from_status(status, orjson.dumps(payload), where, secrets)


def _json_object(data: bytes, where: str, what: str) -> dict[str, Any]:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError(
            f"upstream {where} sent a {what} that is not JSON ({_size(data)})"
        ) from None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError(
            f"upstream {where} sent a {what} that is not a JSON object ({_size(data)})"
        )
    return payload


def _check_shape(payload: dict[str, Any], part: str, where: str) -> None:
    """`choices`, each choice's `part` and `usage` have the types clients rely on."""
    choices = payload.get("choices")
    if choices is not None and not isinstance(choices, list):
        _bad(where, "`choices` is not a list")
    for choice in choices or ():
        if not isinstance(choice, dict):
            _bad(where, "a choice is not an object")
        inner = choice.get(part)
        if inner is not None and not isinstance(inner, dict):
            _bad(where, f"`{part}` is not an object")
    usage = payload.get("usage")
    if usage is not None and not isinstance(usage, dict):
        _bad(where, "`usage` is not an object")


def _bad(where: str, detail: str) -> None:
    raise UpstreamProtocolError(f"upstream {where} sent a malformed chat completion: {detail}")


def _size(data: bytes) -> str:
    # Only the size: the bytes themselves could echo anything, keys included.
    return "empty" if not data.strip() else f"{len(data)} bytes"
