"""Edit top-level fields of a JSON object without re-serialising the rest.

Providers cache prompts by exact bytes, so a gateway that re-serialises a body (other
key order, other whitespace, other escaping) can turn every cache hit into a miss.
`patch_object` changes only the fields it is asked to change and keeps every other
byte, including key order and whitespace, exactly as the client sent it.

The body is never decoded whole: with the native walker (`gateway/_rawjson.c`, built at
install time) the members are found on the bytes, only keys are decoded, and each value
is walked in C, which validates it exactly as `json.JSONDecoder().raw_decode` would
(structure, escapes, strict UTF-8, Python's integer digit limit) and releases the GIL on
a value longer than 64 KiB, so a 30 MiB `messages` array patched in a worker thread does
not hold the event loop. Without it (no C compiler, or `FAREBOX_RAWJSON_NATIVE=0`) the
body is decoded to str and read with Python's decoder; the output bytes are the same.

No input can exhaust the stack: the native walker keeps its own stack on the heap; the
str scan skips nested values by matching brackets with an explicit stack when they are
nested past Python's recursion limit (reading them just far enough to find their end;
callers parse the body first, as the pipeline does). On any input `patch_object` raises
`RawJsonError` and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

ValueEnd = Callable[[bytes, int, int], int]
Splice = Callable[[bytes, list[tuple[int, int, bytes]]], bytes]
SpaceEnd = Callable[[bytes, int], int]
Children = Callable[[bytes, int, int, int], tuple[bytes, int, int, bool]]


def _load() -> tuple[ValueEnd | None, Splice | None, SpaceEnd, Children | None]:
    if os.environ.get("FAREBOX_RAWJSON_NATIVE", "1") == "0":
        return None, None, _regex_space_end, None
    try:
        from gateway import _rawjson  # type: ignore[attr-defined]
    except ImportError:  # built without a C compiler: the str scan, same output
        return None, None, _regex_space_end, None
    return _rawjson.value_end, _rawjson.splice, _rawjson.space_end, _rawjson.children


def _regex_space_end(raw: bytes, pos: int) -> int:
    return _WS_BYTES.match(raw, pos).end()  # type: ignore[union-attr]


_WS = re.compile(r"[ \t\n\r]*")
_WS_BYTES = re.compile(rb"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# Between brackets: scalars, punctuation and whole strings, consumed in one C-level match.
_FILLER = re.compile(r'(?:[ \t\n\r,:.+\-0-9eEtrufalsn]|"(?:[^"\\\x00-\x1f]|\\.)*")*')
_CLOSERS = {"{": "}", "[": "]"}

_native_end, _native_splice, _skip_ws_bytes, _native_children = _load()

NATIVE: bool = _native_end is not None
_native_string: Callable[[bytes, int, int], str | None] | None = None
_native_dump: Callable[[str], bytes | None] | None = None
_native_skip: Callable[[bytes, int], int] | None = None
if NATIVE:
    from gateway import _rawjson  # type: ignore[attr-defined]

    _native_string, _native_dump = _rawjson.string_value, _rawjson.json_string
    _native_skip = getattr(_rawjson, "skip_end", None)  # absent from an older build
SKIPS: bool = _native_skip is not None
"""Whether `patch_object(..., trusted=True)` skips values natively (else it walks them)."""
_native_depth: Callable[[bytes], int] | None = (
    getattr(_rawjson, "max_depth", None) if NATIVE else None  # absent from an older build
)
_native_commas: Callable[[bytes], int] | None = (
    getattr(_rawjson, "commas", None) if NATIVE else None
)
_native_depth_commas: Callable[[bytes], tuple[int, int]] | None = (
    getattr(_rawjson, "depth_commas", None) if NATIVE else None
)
_native_list_or_marker: Callable[[bytes], bool] | None = (
    getattr(_rawjson, "list_or_marker", None) if NATIVE else None
)
_native_skip_children: Callable[[bytes, int, int], tuple[bytes, int]] | None = (
    getattr(_rawjson, "skip_children", None) if NATIVE else None
)
_native_plain: Callable[[Any, frozenset[str]], bool] | None = (
    getattr(_rawjson, "plain_messages", None) if NATIVE else None  # absent from an older build
)


def plain_messages(messages: Any, roles: frozenset[str]) -> bool:
    """Whether `messages` is a list of dicts whose `role` is an exact str in `roles` and
    whose `content` is absent, None, an exact str or an exact list of exact dicts (values
    as orjson makes them); other keys may hold anything. Natively, one C loop (~20 ns a
    message); in Python without the native module (~0.3 us a message)."""
    if _native_plain is not None:
        return _native_plain(messages, roles)
    if type(messages) is not list:
        return False
    for message in messages:
        if type(message) is not dict:
            return False
        role = message.get("role")
        if type(role) is not str or role not in roles:
            return False
        content = message.get("content")
        if content is None or type(content) is str:
            continue
        if type(content) is not list or any(type(part) is not dict for part in content):
            return False
    return True


def value_commas(raw: bytes) -> int:
    """The commas in `raw` outside JSON strings (each separates two members or elements),
    natively (~0.07 ms per MB, against ~0.23 for `raw.count(b",")`); all its commas
    without the native module or when a string does not end (any bytes will do)."""
    if _native_commas is not None and type(raw) is bytes:
        try:
            return _native_commas(raw)
        except ValueError:
            pass
    return raw.count(b",")


def depth_and_commas(raw: bytes) -> tuple[int | None, int]:
    """`(bracket_depth(raw), value_commas(raw))`, natively in one pass over the bytes."""
    if _native_depth_commas is not None and type(raw) is bytes:
        try:
            return _native_depth_commas(raw)
        except ValueError:
            return None, raw.count(b",")
    return bracket_depth(raw), value_commas(raw)


def list_or_marker(raw: bytes) -> bool:
    """Whether `raw`, already valid JSON, has at any depth a `cache_control` or
    `prompt_cache_breakpoint` key, or a `content` key whose value is an array.

    Natively, ~0.1 ms per MB (keys are the strings a colon follows); without the native
    module, or for data that is not JSON, True (the caller takes its careful path).
    """
    if _native_list_or_marker is None or type(raw) is not bytes:
        return True
    try:
        return _native_list_or_marker(raw)
    except ValueError:
        return True


def bracket_depth(raw: bytes) -> int | None:
    """How deep arrays and objects nest in `raw`, already parsed as JSON; None unknown.

    Brackets outside strings, counted natively (~0.1 ms per MB): an upper bound on the
    parsed value's depth, which can be less only when a repeated key's value was dropped.
    None without the native module, or for a buffer that is not bytes.
    """
    if _native_depth is None or type(raw) is not bytes:
        return None
    try:
        return _native_depth(raw)
    except ValueError:  # not JSON after all: the caller walks the parsed value
        return None


# The trusted scan of the last large body (the bytes themselves, their members, the `}`):
# an agent step's prefix check and its upstream patch each scanned its megabyte (~0.1 ms).
# Only bodies in MEMO_BYTES, so what it keeps alive past its request is small.
MEMO_BYTES = (64 * 1024, 2 * 1024 * 1024)
_SCANNED: list[tuple[bytes, list[Member], int] | None] = [None]


class RawJsonError(ValueError):
    """The text is not a JSON object."""


@dataclass(frozen=True, slots=True)
class Member:
    """One `"key": value` pair: where it starts, where its value starts and ends."""

    key: str
    start: int
    value_start: int
    end: int


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _string_end(text: str, pos: int) -> tuple[str, int]:
    """Decode the string whose opening quote is at `pos`; return it and the index after it."""
    try:
        value, end = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
    except ValueError as exc:  # json.JSONDecodeError: unterminated or bad escape
        raise RawJsonError(f"bad string at offset {pos}: {str(exc)[:80]}") from None
    return value, end


def _container_end(text: str, pos: int) -> int:
    """The index after the object or array opening at `pos`, found with a stack."""
    stack = [_CLOSERS[text[pos]]]
    pos += 1
    while stack:
        pos = _FILLER.match(text, pos).end()  # type: ignore[union-attr]
        char = text[pos : pos + 1]
        if char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif not char or stack.pop() != char:
            raise RawJsonError(f"unterminated or mismatched object or array at offset {pos}")
        pos += 1
    return pos


def _value_end(text: str, pos: int) -> int:
    """The index after the JSON value that starts at `pos`."""
    try:
        return int(_DECODER.raw_decode(text, pos)[1])  # C speed, and it validates the value
    except RecursionError:
        # Nested deeper than Python's stack allows: find the end without recursing.
        if text[pos : pos + 1] not in _CLOSERS:
            raise RawJsonError(f"expected a value at offset {pos}") from None
        return _container_end(text, pos)
    except ValueError as exc:  # JSONDecodeError, or an integer over Python's digit limit
        raise RawJsonError(f"bad value at offset {pos}: {str(exc)[:80]}") from None


def scan_members(text: str) -> tuple[list[Member], int]:
    """Locate each top-level member of the object in `text`; return them and the `}` index."""
    pos = _skip_ws(text, 0)
    if not text.startswith("{", pos):
        raise RawJsonError("expected a JSON object")
    pos = _skip_ws(text, pos + 1)
    members: list[Member] = []
    if text.startswith("}", pos):
        return members, pos
    while True:
        if not text.startswith('"', pos):
            raise RawJsonError(f"expected a key at offset {pos}")
        start = pos
        key, pos = _string_end(text, pos)
        pos = _skip_ws(text, pos)
        if not text.startswith(":", pos):
            raise RawJsonError(f"expected ':' at offset {pos}")
        value_start = _skip_ws(text, pos + 1)
        end = _value_end(text, value_start)
        members.append(Member(key, start, value_start, end))
        pos = _skip_ws(text, end)
        if text.startswith("}", pos):
            return members, pos
        if not text.startswith(",", pos):
            raise RawJsonError(f"expected ',' or '}}' at offset {pos}")
        pos = _skip_ws(text, pos + 1)


def scan_raw(raw: bytes, *, native: bool = True, trusted: bool = False) -> tuple[list[Member], int]:
    """Like `scan_members`, on the bytes: offsets are byte offsets.

    `native=False` decodes to str and scans that, as when the walker is not built.
    `trusted`: `raw` was already parsed as JSON, so values are skipped, not validated.
    """
    if native and trusted and _native_skip is not None:
        if not MEMO_BYTES[0] <= len(raw) <= MEMO_BYTES[1] or type(raw) is not bytes:
            return _scan_bytes(raw, _skip, check_tail=False)
        memo = _SCANNED[0]
        if memo is None or memo[0] is not raw:
            memo = (raw, *_scan_bytes(raw, _skip, check_tail=False))
            _SCANNED[0] = memo
        return list(memo[1]), memo[2]
    if native and _native_end is not None:
        return _scan_bytes(raw, _native_end)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RawJsonError(f"body is not UTF-8 at offset {exc.start}") from None
    members, close = scan_members(text)
    return _byte_offsets(text, members, close)


def _byte_offsets(text: str, members: list[Member], close: int) -> tuple[list[Member], int]:
    """The same members with str offsets turned into UTF-8 byte offsets, in one pass."""
    if text.isascii():
        return members, close
    offsets = sorted({o for m in members for o in (m.start, m.value_start, m.end)} | {close})
    to_byte: dict[int, int] = {}
    done = prev = 0
    for offset in offsets:
        done += len(text[prev:offset].encode("utf-8"))
        to_byte[offset] = done
        prev = offset
    moved = [
        Member(m.key, to_byte[m.start], to_byte[m.value_start], to_byte[m.end]) for m in members
    ]
    return moved, to_byte[close]


def children(
    raw: bytes, pos: int, limit: int = 0, resume_in: bool | None = None
) -> tuple[memoryview, int, int, bool]:
    """Where each child of the object or array at `pos` lies, walked natively.

    Returns a flat int64 view of (start, value start, end) triples (start is the key's
    quote for an object member; a view, since a list of millions of ints is itself a long
    hold of the interpreter), the deepest nesting of any child (0 for a scalar), the next
    offset and whether the container is done. Done, the offset is just past it. With a
    `limit`, at most that many children come back, and the offset is where to resume: call
    again there with `resume_in` saying whether the container is an object. Raises
    `RawJsonError` on malformed input, `RuntimeError` without the native walker.
    """
    if _native_children is None:
        raise RuntimeError("the native JSON walker is not built")
    try:
        triples, deepest, end, done = _native_children(
            raw, pos, limit, -1 if resume_in is None else int(resume_in)
        )
    except ValueError as exc:
        raise RawJsonError(f"bad value at offset {pos}: {str(exc)[:80]}") from None
    return memoryview(triples).cast("q"), deepest, end, done


def trusted_children(raw: bytes, pos: int, resume_in: bool | None = None) -> tuple[memoryview, int]:
    """`children(raw, pos, 0, resume_in)`'s triples and end, for `raw` already parsed as
    JSON (orjson's output, a parsed body): strings are skipped with memchr, not validated,
    ~10x faster (~0.1 ms per MB). Falls back to `children` with a build that lacks it.
    Raises `RawJsonError` on malformed input, `RuntimeError` without the native walker.
    """
    if _native_skip_children is None:
        triples, _, end, _ = children(raw, pos, 0, resume_in)
        return triples, end
    try:
        found, end = _native_skip_children(raw, pos, -1 if resume_in is None else int(resume_in))
    except ValueError as exc:
        raise RawJsonError(f"bad value at offset {pos}: {str(exc)[:80]}") from None
    return memoryview(found).cast("q"), end


def string_value(raw: bytes, start: int, end: int) -> str | None:
    """The JSON string at raw[start:end] (quotes included), decoded natively, or None.

    None where orjson must decide (a lone surrogate escape, a control character, invalid
    UTF-8: orjson's own result or error is the reference) and without the native walker.
    A string over 64 KiB is decoded without the interpreter lock: orjson holds it while
    it builds one, ~35 ms for 30 MiB.
    """
    return None if _native_string is None else _native_string(raw, start, end)


def json_string(text: str) -> bytes | None:
    """`orjson.dumps(text)`, natively, or None (without the native walker, or for a str
    holding a surrogate, which orjson refuses). Over 64 KiB without the interpreter lock:
    orjson holds it ~20 ms for 30 MiB."""
    return None if _native_dump is None else _native_dump(text)


def space_end(raw: bytes, pos: int) -> int:
    """The first offset from `pos` that is not JSON whitespace."""
    return _skip_ws_bytes(raw, pos)


def _walk(value_end: ValueEnd, raw: bytes, pos: int) -> int:
    """The offset after the value at `pos`, walked (and validated) in C."""
    try:
        return value_end(raw, pos, sys.get_int_max_str_digits())
    except ValueError as exc:
        raise RawJsonError(f"bad value at offset {pos}: {str(exc)[:80]}") from None


def _key(raw: bytes, start: int, end: int) -> str:
    """Decode a key the walker validated; json keeps the lone surrogates orjson refuses."""
    try:
        key = orjson.loads(memoryview(raw)[start:end])
    except orjson.JSONDecodeError:
        key = json.loads(raw[start:end].decode("utf-8"))
    return str(key)


def _skip(raw: bytes, pos: int, _digits: int) -> int:
    assert _native_skip is not None
    return _native_skip(raw, pos)


def _scan_bytes(
    raw: bytes, value_end: ValueEnd, check_tail: bool = True
) -> tuple[list[Member], int]:
    """Locate each top-level member on the bytes; only keys are decoded."""
    pos = _skip_ws_bytes(raw, 0)
    if not raw.startswith(b"{", pos):
        raise RawJsonError("expected a JSON object")
    pos = _skip_ws_bytes(raw, pos + 1)
    members: list[Member] = []
    if raw.startswith(b"}", pos):
        return members, _after_close(raw, pos) if check_tail else pos
    while True:
        if not raw.startswith(b'"', pos):
            raise RawJsonError(f"expected a key at offset {pos}")
        start, pos = pos, _walk(value_end, raw, pos)
        key = _key(raw, start, pos)
        pos = _skip_ws_bytes(raw, pos)
        if not raw.startswith(b":", pos):
            raise RawJsonError(f"expected ':' at offset {pos}")
        value_start = _skip_ws_bytes(raw, pos + 1)
        end = _walk(value_end, raw, value_start)
        members.append(Member(key, start, value_start, end))
        pos = _skip_ws_bytes(raw, end)
        if raw.startswith(b"}", pos):
            return members, _after_close(raw, pos) if check_tail else pos
        if not raw.startswith(b",", pos):
            raise RawJsonError(f"expected ',' or '}}' at offset {pos}")
        pos = _skip_ws_bytes(raw, pos + 1)


def _after_close(raw: bytes, close: int) -> int:
    """Check what follows the object is UTF-8, as the str scan (which decodes it all) does."""
    try:
        str(memoryview(raw)[close + 1 :], "utf-8")
    except UnicodeDecodeError as exc:
        raise RawJsonError(f"body is not UTF-8 at offset {close + 1 + exc.start}") from None
    return close


def _dump(value: Any) -> bytes:
    return orjson.dumps(value)


def patch_object(
    raw: bytes,
    set_fields: Mapping[str, Any] | None = None,
    remove: Iterable[str] = (),
    *,
    native: bool = True,
    trusted: bool = False,
) -> bytes:
    """Set and remove top-level fields of the JSON object `raw`, keeping all other bytes.

    `native=False` finds the members with the str scan, as when the walker is not built.
    `trusted=True` says `raw` was parsed as JSON already (the pipeline's body, a reply the
    adapter read): its values are skipped (memchr over strings, ~25x faster than the
    validating walk) instead of walked and validated a second time.
    """
    set_fields = dict(set_fields or {})
    removals = set(remove) - set(set_fields)
    if not set_fields and not removals:
        return raw
    members, close = scan_raw(raw, native=native, trusted=trusted)
    edits = _removal_spans(members, removals, close)
    edits += [
        (m.value_start, m.end, _dump(set_fields[m.key])) for m in members if m.key in set_fields
    ]
    kept = any(m.key not in removals for m in members)
    present = {m.key for m in members}
    added = [
        b'"%s":%s' % (_escape_key(k), _dump(v)) for k, v in set_fields.items() if k not in present
    ]
    if added:
        edits.append((close, close, (b"," if kept else b"") + b",".join(added)))
    return _splice(raw, edits, native=native)


def _splice(raw: bytes, edits: list[tuple[int, int, bytes]], *, native: bool) -> bytes:
    """`raw` with each (start, end) span replaced; the spans never overlap."""
    edits.sort()
    if native and _native_splice is not None:
        return _native_splice(raw, edits)  # one copy, without the GIL
    parts: list[bytes] = []
    pos = 0
    for start, end, replacement in edits:
        parts += (raw[pos:start], replacement)
        pos = end
    parts.append(raw[pos:])
    return b"".join(parts)


def _escape_key(key: str) -> bytes:
    return json.dumps(key)[1:-1].encode("ascii")


def _removal_spans(
    members: list[Member], removals: set[str], close: int
) -> list[tuple[int, int, bytes]]:
    """Non-overlapping cuts that drop each removed member with exactly one neighbouring comma."""
    tail = len(members)  # members[tail:] are all removed
    while tail > 0 and members[tail - 1].key in removals:
        tail -= 1
    spans = [
        # Cut from this key up to the next key: removes the trailing comma and whitespace.
        (m.start, members[i + 1].start, b"")
        for i, m in enumerate(members[:tail])
        if m.key in removals
    ]
    if tail < len(members):
        # A removed run at the end: cut from the end of the last kept value, its comma included.
        start = members[tail - 1].end if tail > 0 else members[0].start
        spans.append((start, members[-1].end, b""))
    return spans
