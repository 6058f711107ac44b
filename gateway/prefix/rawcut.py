"""The messages' canonical bytes taken from the body as the client sent it, not dumped again.

A message segment's bytes are `orjson.dumps` of its parsed value (`segments.canonical_bytes`).
When the client's own bytes for a message are already exactly that (compact JSON, UTF-8
text, orjson's escapes, integers, no repeated key: what orjson, and most compact
serialisers, write), the cut can take them as they are: one native walk over the array
(~0.2 ms per MB) instead of dumping every message again and cutting the dump apart (~0.7
ms per MB), and a first-seen 1 MB prompt is fingerprinted from its own bytes. A body in any
other form (indented, `\\u`-escaped text, floats) is dumped as before; so is every body
without the native module (`_locate.canonical_items`), which decides, conservatively,
what is canonical.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count, repeat
from operator import is_
from typing import Any, NamedTuple

from gateway import rawjson
from gateway.prefix.locate import native_step
from gateway.prefix.segments import canonical_bytes

# Below this a body is cut as before: finding its messages' bytes costs more than it saves.
MIN_BYTES = 64 * 1024
# Messages not in canonical form (a last turn written by another serialiser, say) are
# dumped one call each; more than this many, and the whole cut dumps them (one call a
# chunk is cheaper then).
MAX_DUMPED = 64
_CANONICAL_ITEMS = native_step("canonical_items")


class RawMessages(NamedTuple):
    """Each message's canonical bytes, cut out of the body, and what they hold."""

    pieces: list[bytes]  # one per message, in order: orjson.dumps of its parsed value
    flags: bytes  # one byte per message: 1 where it has list content or a cache marker

    def plain_from(self, start: int) -> bool:
        """Whether no message from `start` on has list content or a cache marker."""
        return self.flags.find(1, start) < 0


def messages_start(raw: bytes) -> int | None:
    """Where the only `messages` member's array opens.

    None when the body has no such array, or more than one member of that name (orjson
    keeps the last). `raw` has been parsed already: values are skipped, not validated.
    """
    try:
        members, _ = rawjson.scan_raw(raw, trusted=True)
    except rawjson.RawJsonError:
        return None
    found = [member for member in members if member.key == "messages"]
    if len(found) != 1 or not raw.startswith(b"[", found[0].value_start):
        return None
    return found[0].value_start


def raw_messages(
    raw: bytes, messages: Sequence[Any], value_start: int | None = None
) -> RawMessages | None:
    """The canonical bytes of `messages` taken out of `raw`, or None (then dump them).

    `raw` must be the bytes `messages` was parsed from, unedited: `messages` is the value
    of `raw`'s `messages` member (its array opens at `value_start` when known). The few
    messages whose bytes are not in canonical form are dumped here. None when the body is
    small, more than `MAX_DUMPED` messages are not in canonical form, or the counts differ.
    """
    if _CANONICAL_ITEMS is None or type(raw) is not bytes or len(raw) < MIN_BYTES:
        return None
    start = messages_start(raw) if value_start is None else value_start
    if start is None:
        return None
    found: tuple[list[bytes | None], bytes] | None = _CANONICAL_ITEMS(raw, start, MAX_DUMPED)
    if found is None or len(found[0]) != len(messages):
        return None
    pieces, flags = found
    if None in pieces:  # not in canonical form: dumped, as the cut would
        marks = bytearray(flags)
        for index in list(compress(count(), map(is_, pieces, repeat(None)))):
            piece = canonical_bytes(messages[index])
            pieces[index] = piece
            marks[index] = rawjson.list_or_marker(piece)
        flags = bytes(marks)
    return RawMessages(pieces, flags)  # type: ignore[arg-type]  # no None left
