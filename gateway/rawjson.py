"""Edit top-level fields of a JSON object without re-serialising the rest.

Providers cache prompts by exact bytes, so a gateway that re-serialises a body (other
key order, other whitespace, other escaping) can turn every cache hit into a miss.
`patch_object` changes only the fields it is asked to change and keeps every other
byte, including key order and whitespace, exactly as the client sent it.
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
        key, pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        pos = _skip_ws(text, pos)
        if not text.startswith(":", pos):
            raise RawJsonError(f"expected ':' at offset {pos}")
        value_start = _skip_ws(text, pos + 1)
        _, end = _DECODER.raw_decode(text, value_start)
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
    text = raw.decode("utf-8")
    members, close = scan_members(text)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), non-overlapping
    present = {m.key for m in members}
    for index, member in enumerate(members):
        if member.key in set_fields:
            edits.append((member.value_start, member.end, _dump(set_fields[member.key])))
        elif member.key in removals:
            edits.append(_removal_span(text, members, index, close))
    added = [f'"{_escape_key(k)}":{_dump(v)}' for k, v in set_fields.items() if k not in present]
    if added:
        separator = "," if members else ""
        edits.append((close, close, separator + ",".join(added)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text.encode("utf-8")


def _escape_key(key: str) -> str:
    return json.dumps(key)[1:-1]


def _removal_span(text: str, members: list[Member], index: int, close: int) -> tuple[int, int, str]:
    """The span to cut for member `index`, with exactly one of its neighbouring commas."""
    member = members[index]
    if index + 1 < len(members):
        # Cut from this key up to the next key: removes the trailing comma and whitespace.
        return member.start, members[index + 1].start, ""
    if index > 0:
        # Last member: cut from the end of the previous value, taking the leading comma.
        return members[index - 1].end, member.end, ""
    return member.start, member.end, ""
