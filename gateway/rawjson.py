"""Edit top-level fields of a JSON object without re-serialising the rest.

Providers cache prompts by exact bytes, so a gateway that re-serialises a body (other
key order, other whitespace, other escaping) can turn every cache hit into a miss.
`patch_object` changes only the fields it is asked to change and keeps every other
byte, including key order and whitespace, exactly as the client sent it.

No input can exhaust the stack: nested values are skipped by matching brackets with an
explicit stack, so a body nested thousands of levels deep costs a loop, not the Python
stack. Values are read with the C decoder (fast, and it validates); only a value nested
past Python's recursion limit falls back to that loop, which reads nested values just far
enough to find their end (callers parse the body first, as the pipeline does). On any
input `patch_object` raises `RawJsonError` and nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# Between brackets: scalars, punctuation and whole strings, consumed in one C-level match.
_FILLER = re.compile(r'(?:[ \t\n\r,:.+\-0-9eEtrufalsn]|"(?:[^"\\\x00-\x1f]|\\.)*")*')
_CLOSERS = {"{": "}", "[": "]"}


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


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


def patch_object(
    raw: bytes, set_fields: Mapping[str, Any] | None = None, remove: Iterable[str] = ()
) -> bytes:
    """Set and remove top-level fields of the JSON object `raw`, keeping all other bytes."""
    set_fields = dict(set_fields or {})
    removals = set(remove) - set(set_fields)
    if not set_fields and not removals:
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RawJsonError(f"body is not UTF-8 at offset {exc.start}") from None
    members, close = scan_members(text)
    edits = _removal_spans(members, removals, close)
    edits += [
        (m.value_start, m.end, _dump(set_fields[m.key])) for m in members if m.key in set_fields
    ]
    kept = any(m.key not in removals for m in members)
    present = {m.key for m in members}
    added = [f'"{_escape_key(k)}":{_dump(v)}' for k, v in set_fields.items() if k not in present]
    if added:
        edits.append((close, close, ("," if kept else "") + ",".join(added)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text.encode("utf-8")


def _escape_key(key: str) -> str:
    return json.dumps(key)[1:-1]


def _removal_spans(
    members: list[Member], removals: set[str], close: int
) -> list[tuple[int, int, str]]:
    """Non-overlapping cuts that drop each removed member with exactly one neighbouring comma."""
    tail = len(members)  # members[tail:] are all removed
    while tail > 0 and members[tail - 1].key in removals:
        tail -= 1
    spans = [
        # Cut from this key up to the next key: removes the trailing comma and whitespace.
        (m.start, members[i + 1].start, "")
        for i, m in enumerate(members[:tail])
        if m.key in removals
    ]
    if tail < len(members):
        # A removed run at the end: cut from the end of the last kept value, its comma included.
        start = members[tail - 1].end if tail > 0 else members[0].start
        spans.append((start, members[-1].end, ""))
    return spans
