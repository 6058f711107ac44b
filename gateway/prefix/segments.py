"""Cut a chat-completions body into the segments the upstream renders, in render order.

A segment's canonical bytes are the compact JSON of the parsed value *in the key order the
client sent* (Python dicts keep it and orjson keeps it): the provider renders schemas and
arguments in that order, so a re-ordered key is a different prompt, while whitespace is not.
Cache markers (`cache_control`, `prompt_cache_breakpoint`) are removed first: they say
where to cache, they are not prompt text, and clients move them every turn.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
import xxhash

from gateway import rawjson
from gateway.frozen import mutable_twin
from gateway.prefix.cache_rules import CacheRule, Family
from gateway.prefix.locate import moved_tuple, native_step, untrack_tuples
from gateway.prefix.locate import untracked as untracked_container

if TYPE_CHECKING:
    from gateway.prefix.rawcut import RawMessages

DIGEST_SIZE = 16
# Segments leave cyclic GC this many at a time, for requests with more (`untrack_tuples`).
UNTRACK_EVERY = 1_024
# Messages serialised per orjson call (see `dump_each`): at most this many, sized after
# the first chunk to about `DUMP_BYTES` of output.
DUMP_CHUNK = 2_048
DUMP_FIRST = 64
DUMP_BYTES = 512 * 1024
# Up to this many messages (after the system ones) are serialised one call each: the
# chunking and the native cut of `dump_each` cost more than they save on a small request.
FEW_MESSAGES = 8
# A message whose content is a longer string is serialised on its own (`_dump_long`).
LONG_STRING = 256 * 1024
_MARKERS = ("cache_control", "prompt_cache_breakpoint")
_MARKER_BYTES = (b'"cache_control"', b'"prompt_cache_breakpoint"')
_SYSTEM_ROLES = frozenset({"system", "developer"})
# Settings a family may render into the prompt, gathered into one segment each.
_EFFORT_KEYS = ("reasoning_effort", "thinking", "output_config.effort", "chat_template_kwargs")
_SPEED_KEYS = ("service_tier", "speed")
# The native steps of the cut (`_locate.c`), None without it: the Python loops below.
_ARRAY_ITEMS = native_step("array_items")
_FIRST_LONG = native_step("first_long")
_ROLES = native_step("roles")
_PLAIN_SEGMENTS = native_step("plain_segments")


class SegmentKind(StrEnum):
    """What a segment holds."""

    TOOLS = "tools"
    SYSTEM = "system"
    SETTING = "setting"
    SCHEMA = "schema"
    MESSAGE = "message"


class Segment(NamedTuple):
    """One rendered part of the prompt and its canonical bytes.

    A NamedTuple, not a frozen dataclass: a request has hundreds of segments and a frozen
    dataclass's __init__ costs ~2 µs each on the dev box, a tuple a fraction of that.
    """

    name: str
    kind: SegmentKind
    data: bytes
    digest: bytes
    breakpoint: bool = False
    canonical: bytes = b""
    role: str = ""

    @property
    def text(self) -> str:
        """Return the canonical JSON text that detector offsets refer to."""
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class RequestSegments:
    """A request cut into segments; segments before `stable_count` are the cacheable part."""

    family: Family
    model: str
    segments: tuple[Segment, ...]
    stable_count: int
    header_count: int
    implicit_breakpoint: bool

    def names(self) -> list[str]:
        """Return the segment names in render order."""
        return [segment.name for segment in self.segments]


_REQUEST_SEGMENTS = mutable_twin(RequestSegments)  # a store per field (`gateway.frozen`)


def digest(data: bytes) -> bytes:
    """Return the 16-byte digest of `data`.

    XXH3-128: a prompt of 1 MB hashes in ~0.08 ms here, against ~0.7 ms for SHA-256 and
    ~1.5 ms for BLAKE2b, and the check runs on every request. The digests only predict
    cache hits, so a non-cryptographic hash is enough; records shared between processes
    need one fixed choice.
    """
    return xxhash.xxh3_128_digest(data)[:DIGEST_SIZE]


def canonical_bytes(value: Any) -> bytes:
    """Return compact JSON for `value` in its own key order."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        # orjson refuses integers beyond 64 bits; the standard library does not.
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def strip_markers(value: Any) -> Any:
    """Return `value` without cache markers at any depth."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k not in _MARKERS}
    if isinstance(value, list):
        return [strip_markers(item) for item in value]
    return value


def _message_segments(
    messages: list[Any],
    start: int,
    headers: list[Segment] | None = None,
    raw: RawMessages | None = None,
) -> list[Segment]:
    """Return `headers`, then one segment per message from `start` on.

    With `raw` (`rawcut.raw_messages`: each message's canonical bytes as the client sent
    them), the messages are not dumped again: the same bytes, so the same segments.

    Messages are serialised a chunk per orjson call; the segments of a long conversation
    leave cyclic GC as they are made (see `untrack_tuples`), so the list that holds them,
    and the tuple made of it, can too.

    The loop is the hot path (hundreds of messages per request), hence the local names and
    the inlined checks; a message with list content or a cache marker takes the slow path.
    """
    headers = headers or []
    if start >= len(messages):
        return headers
    few = messages[start:] if len(messages) - start <= FEW_MESSAGES else None
    if raw is not None:
        pieces = raw.pieces[start:]
        if raw.plain_from(start) and len(raw.pieces) <= _NAMES_KEPT:
            return _plain_segments(messages, start, pieces, headers)
    elif few is not None and not (rawjson.NATIVE and _first_long(few) is not None):
        # What `dump_each` cuts out of one array, without its chunking (~5 µs a request)
        pieces = [canonical_bytes(message) for message in few]
    else:
        plain: list[bool] = []
        pieces = dump_each(messages, start, plain)
        if all(plain) and start + len(pieces) <= _NAMES_KEPT:
            return _plain_segments(messages, start, pieces, headers)
    xxh3 = xxhash.xxh3_128_digest
    new = tuple.__new__  # Segment._make without its Python-level wrapper
    kind = SegmentKind.MESSAGE
    kept = _NAMES
    # Untracked while empty (see `untracked`): it only ever holds untracked segments.
    segments: list[Segment] = untracked_container([]) if len(pieces) >= UNTRACK_EVERY else []
    segments += headers
    append = segments.append
    untracked = len(headers)
    for index, data in enumerate(pieces, start):
        message = messages[index]
        name = kept[index] if index < _NAMES_KEPT else f"messages[{index}]"
        if type(message) is not dict:
            append(new(Segment, (name, kind, data, digest(data), False, b"", "")))
            continue
        role = message.get("role")
        role_name = role if type(role) is str else ""
        if (
            type(message.get("content")) is list
            or "cache_control" in message
            or "prompt_cache_breakpoint" in message
        ):
            append(_rendered_message(name, message, role_name))
            continue
        fields = (name, kind, data, xxh3(data)[:DIGEST_SIZE], False, b"", role_name)
        append(new(Segment, fields))
        if len(segments) - untracked >= UNTRACK_EVERY:
            # As they are made: else each collection meanwhile walks all, lock held.
            untrack_tuples(segments, kind, untracked)
            untracked = len(segments)
    if len(segments) >= UNTRACK_EVERY:
        untrack_tuples(segments, kind, untracked)
    return segments


def _plain_segments(
    messages: list[Any], start: int, pieces: list[bytes], headers: list[Segment]
) -> list[Segment]:
    """`_message_segments`' loop for messages that all take its plain path, in C-level maps.

    Their bytes hold no list-valued `content` and no cache marker key, at any depth
    (`rawjson.list_or_marker`), so none takes the slow path: each segment is its name,
    its bytes and their digest, and its role, made in C-level maps, not a loop.
    """
    xxh3 = xxhash.xxh3_128_digest  # DIGEST_SIZE bytes already: nothing to cut
    stop = start + len(pieces)
    if _ROLES is not None and type(messages) is list:
        roles = _ROLES(messages, start, stop)
    else:
        roles = [
            role if type(role := m.get("role") if type(m) is dict else None) is str else ""
            for m in messages[start:stop]
        ]
    segments: list[Segment] = untracked_container([]) if len(pieces) >= UNTRACK_EVERY else []
    segments += headers
    if _PLAIN_SEGMENTS is not None and type(pieces) is list and type(roles) is list:
        # The zip and the map below in one C loop, one allocation a segment (~0.3 ms less
        # for 1,244 messages); out of cyclic GC as `untrack_tuples` takes them.
        _PLAIN_SEGMENTS(
            segments, Segment, _NAMES[start:stop], SegmentKind.MESSAGE, pieces, xxh3, roles
        )
        return segments
    fields = zip(
        _NAMES[start:stop],
        repeat(SegmentKind.MESSAGE),
        pieces,
        map(xxh3, pieces),
        repeat(False),
        repeat(b""),
        roles,
        strict=False,
    )
    untracked = len(segments)
    segments += map(tuple.__new__, repeat(Segment), fields)  # Segment._make, in C
    if len(segments) >= UNTRACK_EVERY:
        untrack_tuples(segments, SegmentKind.MESSAGE, untracked)
    return segments


assert DIGEST_SIZE == 16  # what xxh3_128_digest gives: `_plain_segments` does not cut it

# Names kept for the process: enough for any real conversation, bounded whatever comes in
# (one request of two million messages once held 147 MiB of names for good).
_NAMES_KEPT = 4096
_NAMES: list[str] = [f"messages[{i}]" for i in range(_NAMES_KEPT)]


def rendered_message(message: Any) -> Any:
    """Return a message as the provider renders it: no cache markers, a lone text part as text.

    `"content": "x"` and `[{"type": "text", "text": "x"}]` render alike, and clients (and
    our own breakpoint placement) switch between them when they move a marker.
    """
    if not isinstance(message, dict):
        return message
    value = strip_markers(message) if _has_marker(message) else message
    content = value.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        part = content[0]
        if part.get("type") == "text" and isinstance(part.get("text"), str) and len(part) == 2:
            return {**value, "content": part["text"]}
    return value


def _rendered_message(name: str, message: dict[str, Any], role: str) -> Segment:
    data = canonical_bytes(rendered_message(message))
    return Segment(name, SegmentKind.MESSAGE, data, digest(data), _has_marker(message), b"", role)


def _has_marker(message: Any) -> bool:
    """Return whether a message carries a cache marker on itself or on a content part.

    Looked up in the structure, where clients put them, rather than searched for in a
    megabyte of bytes: two substring searches cost ~0.6 ms per MB on the dev box.
    """
    if not isinstance(message, dict):
        return False
    if "cache_control" in message or "prompt_cache_breakpoint" in message:
        return True
    content = message.get("content")
    if not isinstance(content, list):
        return False
    return any(
        isinstance(part, dict) and ("cache_control" in part or "prompt_cache_breakpoint" in part)
        for part in content
    )


def dump_each(values: list[Any], start: int = 0, plain: list[bool] | None = None) -> list[bytes]:
    """Return the canonical bytes of each of `values[start:]`, one orjson call per chunk.

    `plain`, when given, gets one flag per chunk: whether its bytes have no list-valued
    `content` and no cache marker key (`rawjson.list_or_marker`; False where not looked at).

    orjson's per-call cost (buffer growth for each output) made 400 separate calls ~6x
    slower than one call over the list. One call over all of them, though, holds the
    interpreter lock as long as it runs: ~50 ms for 466,000 messages, during which the event
    loop waits. A chunk of about `DUMP_BYTES` of output (at most `DUMP_CHUNK` values,
    sized by the size of the values so far) keeps each call near a millisecond, and the
    lock changes hands between chunks.
    """
    pieces: list[bytes] = untracked_container([])  # bytes only: never in a cycle
    first, count, written = start, DUMP_FIRST, 0
    while first < len(values):
        part = values[first : first + count]
        long = _first_long(part) if rawjson.NATIVE else None
        if long == 0:
            chunk, clear = [_dump_long(part[0])], False
        else:
            chunk, clear = _dump_chunk(part if long is None else part[:long])
        if plain is not None:
            plain.append(clear)
        pieces += chunk
        first += len(chunk)
        written += sum(map(len, chunk))
        average = written // (first - start) + 1
        count = max(1, min(DUMP_CHUNK, DUMP_BYTES // average))
    return pieces


def _first_long(values: list[Any]) -> int | None:
    """The index of the first message whose content is a string over `LONG_STRING`."""
    if _FIRST_LONG is not None and type(values) is list:  # the loop below, in C (~0.2 ms)
        first: int | None = _FIRST_LONG(values, LONG_STRING)
        return first
    found = [
        i
        for i, v in enumerate(values)
        if type(v) is dict and type(c := v.get("content")) is str and len(c) > LONG_STRING
    ]
    return found[0] if found else None


def _dump_long(message: dict[str, Any]) -> bytes:
    """`orjson.dumps(message)` for a message with a long string: its strings natively.

    orjson holds the interpreter lock while it writes 30 MiB (~20 ms), and cutting the
    piece out of its array copies them once more (~20 ms with the page faults); the native
    encoder writes the same bytes without the lock, and the join copies without it too.
    """
    parts: list[bytes] = [b"{"]
    for key, value in message.items():
        name = rawjson.json_string(key) if type(key) is str else None
        text = rawjson.json_string(value) if type(value) is str else None
        if name is None or (text is None and type(value) is str):
            return canonical_bytes(message)  # a key orjson refuses, a surrogate: as before
        if text is None:
            try:
                text = orjson.dumps(value)
            except (orjson.JSONEncodeError, TypeError):
                return canonical_bytes(message)
        parts += (name, b":", text, b",")
    parts[-1] = b"}" if len(parts) > 1 else b"{}"
    return b"".join(parts)


def _dump_chunk(values: list[Any]) -> tuple[list[bytes], bool]:
    """The canonical bytes of each value, cut out of one orjson array, and whether that
    array is free of list-valued `content` and cache markers (~0.1 ms per MB to look).

    The native walker finds where each item lies (without the lock on a big array),
    skipping strings: the array is orjson's own output, valid JSON. Without
    it, the array is cut at a random sentinel placed between the items, verified by count;
    `bytes.split` re-prepares a long separator for every piece (~0.3 µs each), which is why
    it is not the first choice.
    """
    try:
        batch = orjson.dumps(values)
    except (orjson.JSONEncodeError, TypeError):
        # orjson refuses integers beyond 64 bits; the standard library does not.
        return [canonical_bytes(v) for v in values], False
    clear = not rawjson.list_or_marker(batch)  # natively: `in` takes ~1 ms per MB each
    if _ARRAY_ITEMS is not None:  # the walk and the slices below in one C call
        try:
            items: list[bytes] = _ARRAY_ITEMS(batch)
        except ValueError:  # not orjson's compact array after all: the walker decides
            pass
        else:
            if len(items) == len(values):
                return items, clear
    if rawjson.NATIVE:  # orjson's own output: skipped, not validated again (~1 ms per MB)
        spans = rawjson.trusted_children(batch, 0)[0]
        return [batch[a:b] for a, b in zip(spans[1::3], spans[2::3], strict=True)], clear
    return _split_at_sentinel(values), clear


def _split_at_sentinel(values: list[Any]) -> list[bytes]:
    sentinel = secrets.token_hex(16)
    interleaved: list[Any] = [sentinel] * (2 * len(values) - 1)
    interleaved[::2] = values
    batch = orjson.dumps(interleaved)
    # Split the whole output and trim the brackets off the ends: slicing [1:-1] first
    # would copy the megabyte once more.
    pieces = batch.split(b',"' + sentinel.encode() + b'",')
    pieces[0] = pieces[0][1:]
    pieces[-1] = pieces[-1][:-1]
    if len(pieces) != len(values):
        pieces = [canonical_bytes(v) for v in values]
    return pieces


def _segment(name: str, kind: SegmentKind, value: Any) -> Segment:
    """Return a header segment; JSON-structured ones also get a sorted-key digest.

    A header the body does not have (most requests: no tools, settings or schema) is one
    shared segment; the sorted-key digest of one that repeats (an agent's tools, every
    step) is kept by its bytes' digest, which determine it (see `_SORTED`).
    """
    if value is None:
        absent = _ABSENT.get((name, kind))
        if absent is None:
            absent = _ABSENT[(name, kind)] = _make_segment(name, kind, None)
        return absent
    return _make_segment(name, kind, value)


def _make_segment(name: str, kind: SegmentKind, value: Any) -> Segment:
    data = canonical_bytes(value)
    marked = False
    if (_MARKER_BYTES[0] in data or _MARKER_BYTES[1] in data) and isinstance(value, dict | list):
        stripped = canonical_bytes(strip_markers(value))
        marked = stripped != data
        data = stripped
    hashed = digest(data)
    canonical = b""
    if kind in (SegmentKind.TOOLS, SegmentKind.SETTING, SegmentKind.SCHEMA):
        # `data` is the compact JSON of the (marker-free) value in its own key order, so it
        # determines the sorted form: the digest of one is kept by the digest of the other.
        canonical = _SORTED.get((kind, hashed), b"")
        if not canonical:
            canonical = digest(sorted_form(strip_markers(value) if marked else value, kind))
            if len(_SORTED) >= SORTED_KEEP:
                _SORTED.clear()
            _SORTED[(kind, hashed)] = canonical
    return Segment(name, kind, data, hashed, marked, canonical)


_ABSENT: dict[tuple[str, SegmentKind], Segment] = {}
"""Header segments of a part the body leaves out, by name and kind: a handful."""
_SORTED: dict[tuple[SegmentKind, bytes], bytes] = {}
"""Sorted-key digests by the digest of the header's canonical bytes (bounded)."""
SORTED_KEEP = 4096


def sorted_form(value: Any, kind: SegmentKind = SegmentKind.SCHEMA) -> bytes:
    """Return `value` serialised with sorted keys (and tools sorted by name)."""
    if kind is SegmentKind.TOOLS and isinstance(value, list):
        value = sorted(value, key=tool_name)
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def tool_name(tool: Any) -> str:
    """Return a tool definition's name, or "" when it has none."""
    if not isinstance(tool, dict):
        return ""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""


def _settings(body: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any] | None:
    found: dict[str, Any] = {}
    for key in keys:
        outer, _, inner = key.partition(".")
        value = body.get(outer)
        if inner:
            value = value.get(inner) if isinstance(value, dict) else None
        if value is not None:
            found[key] = value
    return found or None


def _header(body: Mapping[str, Any], part: str, system: list[Any]) -> Segment:
    if part == "system":
        if not system:  # no system prompt: one shared segment
            absent = _ABSENT.get(("system", SegmentKind.SYSTEM))
            if absent is None:
                absent = Segment("system", SegmentKind.SYSTEM, b"[]", digest(b"[]"), False)
                _ABSENT[("system", SegmentKind.SYSTEM)] = absent
            return absent
        data = canonical_bytes([rendered_message(m) for m in system])
        marked = any(_has_marker(m) for m in system)
        return Segment("system", SegmentKind.SYSTEM, data, digest(data), marked)
    if part == "tools":
        tools = body.get("tools")
        return _segment(
            "tools", SegmentKind.TOOLS, body.get("functions") if tools is None else tools
        )
    if part == "effort":
        return _segment("effort", SegmentKind.SETTING, _settings(body, _EFFORT_KEYS))
    if part == "speed":
        return _segment("speed", SegmentKind.SETTING, _settings(body, _SPEED_KEYS))
    if part == "response_format":
        return _segment("response_format", SegmentKind.SCHEMA, body.get("response_format"))
    return _segment(part, SegmentKind.SETTING, body.get(part))


def leading_system_count(messages: Sequence[Any]) -> int:
    """Return how many system or developer messages open the conversation."""
    count = 0
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in _SYSTEM_ROLES:
            break
        count += 1
    return count


def message_index(name: str) -> int | None:
    """Return i for a segment named "messages[i]", else None."""
    if name.startswith("messages[") and name.endswith("]"):
        return int(name[9:-1])
    return None


def newest_turn(messages: Sequence[Any], start: int) -> int:
    """Return the index of the newest user message (the last message if there is none)."""
    for index in range(len(messages) - 1, start - 1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return max(len(messages) - 1, start)


def _implicit_breakpoint(body: Mapping[str, Any], family: Family) -> bool:
    """Return whether the provider adds a breakpoint of its own at the end of the prompt."""
    if family == "anthropic":
        return body.get("cache_control") is not None  # top-level automatic caching
    options = body.get("prompt_cache_options")
    return family == "openai" and not (
        isinstance(options, dict) and options.get("mode") == "explicit"
    )


_HEADER_KEYS = frozenset(
    {key.partition(".")[0] for key in (*_EFFORT_KEYS, *_SPEED_KEYS)}
    | {"tools", "functions", "response_format", "tool_choice"}
)
"""The body members the named header parts read (`_header`); any other part reads its own."""
_ABSENT_HEADERS: dict[tuple[str, ...], tuple[frozenset[str], tuple[Segment, ...]]] = {}


def _absent_headers(order: tuple[str, ...]) -> tuple[frozenset[str], tuple[Segment, ...]]:
    """The body members the parts of `order` read, and the header segments of a body with
    none of them and no system message: the parts' absent segments (`_header` of an empty
    body, the very same), out of cyclic GC; kept by order (a few families')."""
    found = _ABSENT_HEADERS.get(order)
    if found is None:
        headers = tuple(_header({}, part, []) for part in order)
        for header in headers:
            untrack_tuples([header], header.kind)
        found = (_HEADER_KEYS | frozenset(order), headers)
        if len(_ABSENT_HEADERS) < 64:
            _ABSENT_HEADERS[order] = found
    return found


class Known(NamedTuple):
    """The message segments of an earlier request whose messages this one repeats."""

    upto: int  # messages[:upto] are, byte for byte, that request's
    system: int  # its leading system messages (in the headers)
    segments: tuple[Segment, ...]  # the segments of messages[system:upto]


def split_request(
    body: Mapping[str, Any],
    rule: CacheRule,
    known: Known | None = None,
    raw: RawMessages | None = None,
) -> RequestSegments:
    """Cut `body` into segments in the order the rule's family renders them.

    With `known` (see `gateway.prefix.reuse`), the messages it covers are not cut again;
    with `raw` (see `gateway.prefix.rawcut`), the others' bytes are taken from the body
    the client sent, not dumped again.
    """
    raw_messages = body.get("messages")
    messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
    n_system = leading_system_count(messages)
    absent = _absent_headers(rule.header_order) if n_system == 0 else None
    if absent is not None and body.keys().isdisjoint(absent[0]):
        # No header in the body (most small requests): the parts' shared absent segments,
        # as `_header` gives them, out of cyclic GC once.
        headers = [*absent[1]]
    else:
        headers = [_header(body, part, messages[:n_system]) for part in rule.header_order]
        for header in headers:  # atoms and their kind, as the messages' (see below)
            untrack_tuples([header], header.kind)
    header_count = len(headers)
    start = n_system
    if known is not None and known.system == n_system and n_system <= known.upto <= len(messages):
        headers += known.segments  # already out of cyclic GC, as they were made
        start = known.upto
    if raw is not None and len(raw.pieces) != len(messages):
        raw = None  # not this body's messages: dump them
    segments = _message_segments(messages, start, headers, raw)
    newest = newest_turn(messages, n_system) if len(messages) > n_system else len(messages)
    stable = header_count + max(newest - n_system, 0)
    model = body.get("model")
    # By position, in `RequestSegments`' field order (keywords cost ~0.4 µs more).
    return _REQUEST_SEGMENTS(
        rule.family,
        model if isinstance(model, str) else "",
        moved_tuple(segments, acyclic=True),  # moved, not copied: atoms, in no cycle
        stable,
        header_count,
        _implicit_breakpoint(body, rule.family),
    )
