"""Load a large JSON body a slice at a time, so the event loop is never held for long.

`orjson.loads` of a body near the size limit is one C call that holds the interpreter
lock for as long as it builds objects: 0.2-0.6 s for hundreds of thousands of messages,
during which no other thread (the event loop) runs. Here the native walker
(`gateway/_rawjson.c`) finds where each member and element lies, without the lock, and
the values are built by orjson a slice of about a millisecond at a time.

The loader is a generator, so the logic stays free of I/O: it yields `None` where its
driver may let other work run, and an `Offload` for a walk that should leave the calling
thread (the driver runs it in a worker and sends the result back). `drive` runs it inline.

The result is what `load_object` returns for the same bytes, or `Unsliceable`: for every
input that is not a valid, shallow enough JSON object (and a few that orjson reads
differently from the walker: NaN, lone surrogates), the caller falls back to
`load_object`, which gives the exact error. Checked by tests/unit/test_sliced_parse.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from gateway import rawjson
from gateway.prefix.locate import acyclic_list

# A value longer than this is built on its own: an object or array a slice at a time,
# anything else (a long string) in one orjson call beside the loop.
SPLIT_BYTES = 128 * 1024
# One slice: at most this many elements or bytes (~0.5-1 ms of orjson, or of validation).
SLICE_ITEMS = 512
SLICE_BYTES = 128 * 1024
# Children located per native walk: their offsets take 24 bytes each, and a body of
# tiny elements (`[0,0,...]`) has millions of them.
WINDOW_CHILDREN = 64 * 1024
# Values nested deeper than this are built whole: each level walks its bytes again, so
# the walk stays within a few passes over the body whatever its shape.
SPLIT_LEVELS = 6

T = TypeVar("T")


class Unsliceable(Exception):
    """The body is not one the slicer reproduces exactly: parse it whole for the error."""


@dataclass(frozen=True, slots=True)
class Offload:
    """A call the driver should run beside the loop (it releases the interpreter lock)."""

    call: Callable[[], Any]


Steps = Generator[Offload | None, Any, T]


def drive(steps: Steps[T]) -> T:
    """Run a sliced computation to its end on this thread."""
    sent: Any = None
    while True:
        try:
            request = steps.send(sent)
        except StopIteration as done:
            return done.value
        sent = request.call() if isinstance(request, Offload) else None


def load_sliced(raw: bytes, max_depth: int) -> Steps[dict[str, Any]]:
    """The JSON object in `raw`, built a slice at a time; `Unsliceable` if it is not one."""
    start = rawjson.space_end(raw, 0)
    if not raw.startswith(b"{", start):
        raise Unsliceable
    body, end = yield from _container(raw, start, 1, max_depth)
    if rawjson.space_end(raw, end) != len(raw):
        raise Unsliceable  # something after the object: orjson's error names it
    assert isinstance(body, dict)
    return body


def _children(raw: bytes, pos: int, resume_in: bool | None) -> tuple[memoryview, int, int, bool]:
    try:
        return rawjson.children(raw, pos, WINDOW_CHILDREN, resume_in)
    except rawjson.RawJsonError:
        raise Unsliceable from None


def _loads(data: bytes | bytearray | memoryview) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise Unsliceable from None  # NaN, a lone surrogate, too deep for orjson


def _container(raw: bytes, start: int, depth: int, max_depth: int) -> Steps[tuple[Any, int]]:
    """The object or array at `start`, nested `depth` levels deep (the body is 1), and its end."""
    is_object = raw[start] == ord("{")
    result: Any = {} if is_object else acyclic_list()  # an array of megabytes: see acyclic_list
    resume_in: bool | None = None  # the first window starts at the opening bracket
    pos, done = start, False
    while not done:
        window = functools.partial(_children, raw, pos, resume_in)
        spans, deepest, pos, done = yield Offload(window)
        if depth + deepest > max_depth:
            raise Unsliceable  # load_object names the limit, or orjson its own
        yield from _build(raw, spans, result, is_object, depth, max_depth)
        resume_in = is_object
    return result, pos


def _build(
    raw: bytes, spans: memoryview, result: Any, is_object: bool, depth: int, max_depth: int
) -> Steps[None]:
    """Add the children at `spans` to `result`, a slice at a time."""
    count = len(spans) // 3
    i = 0
    while i < count:
        value_start, value_end = spans[3 * i + 1], spans[3 * i + 2]
        if value_end - value_start > SPLIT_BYTES:
            if raw[value_start] in b"{[" and depth < SPLIT_LEVELS:
                value, _ = yield from _container(raw, value_start, depth + 1, max_depth)
            else:  # a long string, or nested deep: beside the loop
                value = yield Offload(functools.partial(_long_value, raw, value_start, value_end))
            if is_object:
                result[_key(raw, spans[3 * i], value_start)] = value
            else:
                result.append(value)
            i += 1
            continue
        j = _slice_end(spans, i, count)
        _add(result, raw, spans[3 * i], spans[3 * j - 1], is_object)
        i = j
        yield None


def _long_value(raw: bytes, start: int, end: int) -> Any:
    """A long string decoded natively, without the interpreter lock (30 MiB: ~35 ms of
    orjson holding it); anything else, or a string only orjson may judge, by orjson."""
    if raw[start] == ord('"'):
        value = rawjson.string_value(raw, start, end)
        if value is not None:
            return value
    return _loads(memoryview(raw)[start:end])


def _slice_end(spans: memoryview, i: int, count: int) -> int:
    """The end of the slice starting at child `i`: up to the items and bytes of one slice."""
    first = spans[3 * i]
    j = i + 1
    while j < count and j - i < SLICE_ITEMS and spans[3 * j + 2] - first <= SLICE_BYTES:
        value_start, end = spans[3 * j + 1], spans[3 * j + 2]
        if end - value_start > SPLIT_BYTES:
            break  # a big child is built on its own
        j += 1
    return j


def _add(result: Any, raw: bytes, start: int, end: int, is_object: bool) -> None:
    """Build the children in raw[start:end] with one orjson call and add them in order."""
    part = bytearray(b"{" if is_object else b"[")
    part += memoryview(raw)[start:end]
    part += b"}" if is_object else b"]"
    values = _loads(part)
    if is_object:
        result.update(values)  # a repeated key: first place, last value, as orjson does
    else:
        result.extend(values)


def _key(raw: bytes, start: int, value_start: int) -> str:
    colon = raw.rindex(b":", start, value_start)
    return str(_loads(memoryview(raw)[start:colon]))
