"""Reuse the segments of a task's earlier messages when its next request repeats their bytes.

An agent step sends the whole conversation again with a turn or two added. Cutting it
into segments dumps and hashes every message (~1.9 ms for 1 MB here), though all but the
last few are, byte for byte, those of the task's previous request. A message's segment
is a function of its parsed value alone, and its parsed value a function of its bytes.
So when this body's bytes, up to the end of the previous request's last message, are
that request's bytes (compared, not hashed: exact, ~0.05 ms per MB), and `messages` is
the only member of that name in both bodies (a repeated key would make orjson keep the
later one), the earlier messages' segments are the ones cut then; only the new tail is
dumped and hashed.

Kept per key (the pipeline passes a task's), the latest request only, at most
`KEEP_BYTES` of bodies in all; bodies under `MIN_BYTES` are cut whole, as before (their
cut costs less than the bookkeeping).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import rawjson
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.segments import Known, RequestSegments, split_request

MIN_BYTES = 64 * 1024
KEEP_BYTES = 32 * 1024 * 1024
# A body over this is not kept: comparing it would cost more than its share of the keep.
MAX_BODY_BYTES = KEEP_BYTES // 4
_SPACE = b" \t\r\n"


@dataclass(frozen=True, slots=True)
class _Seen:
    """One earlier request of a key: its body and where its messages were."""

    raw: bytes  # the body itself, kept (not copied) to compare the next one against
    value_start: int  # where its `messages` array opened
    head_end: int  # just past its last message
    known: Known


class SegmentReuse:
    """The latest large request of each key, to cut the next one's repeated messages once."""

    def __init__(self, keep_bytes: int = KEEP_BYTES, min_bytes: int = MIN_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.min_bytes = min_bytes
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()  # a body over 2 MiB is checked in a worker thread

    def split(
        self, key: str, raw: bytes, body: Mapping[str, Any], rule: CacheRule
    ) -> RequestSegments:
        """`split_request(body, rule)`, reusing what `key`'s previous request cut.

        `body` must be `raw` parsed (its `messages` unedited).
        """
        where = _messages_span(raw) if len(raw) >= self.min_bytes else None
        if where is None:
            return split_request(body, rule)
        value_start, head_end = where
        with self._lock:
            seen = self._seen.get(key)
        known = seen.known if seen is not None and _repeats(seen, raw, value_start) else None
        request = split_request(body, rule, known)
        messages = body.get("messages")
        if isinstance(messages, list) and head_end > value_start + 1:
            system = len(messages) - (len(request.segments) - request.header_count)
            segments = request.segments[request.header_count :]
            kept = Known(len(messages), system, segments)
            self._keep(key, _Seen(raw, value_start, head_end, kept))
        return request

    def unseen(self, key: str, raw: bytes) -> int:
        """How many bytes of `raw` follow what `key`'s previous request showed (all if none)."""
        with self._lock:
            seen = self._seen.get(key)
        if seen is None or len(raw) <= seen.head_end:
            return len(raw)
        if not raw.startswith(memoryview(seen.raw)[: seen.head_end]):
            return len(raw)
        return len(raw) - seen.head_end

    def _keep(self, key: str, seen: _Seen) -> None:
        with self._lock:
            old = self._seen.pop(key, None)
            if old is not None:
                self._held -= len(old.raw)
            if len(seen.raw) > min(MAX_BODY_BYTES, self.keep_bytes):
                return
            self._seen[key] = seen
            self._held += len(seen.raw)
            while self._held > self.keep_bytes:
                _, dropped = self._seen.popitem(last=False)
                self._held -= len(dropped.raw)


def _messages_span(raw: bytes) -> tuple[int, int] | None:
    """Where the only `messages` member's array opens, and the offset past its last item.

    None when the body has no such array, or more than one member of that name. `raw`
    has been parsed already: values are skipped, not validated.
    """
    try:
        members, _ = rawjson.scan_raw(raw, trusted=True)
    except rawjson.RawJsonError:
        return None
    found = [member for member in members if member.key == "messages"]
    if len(found) != 1 or not raw.startswith(b"[", found[0].value_start):
        return None
    end = found[0].end - 1  # the closing bracket
    while end > found[0].value_start and raw[end - 1] in _SPACE:
        end -= 1
    return found[0].value_start, end


def _repeats(seen: _Seen, raw: bytes, value_start: int) -> bool:
    """Whether `raw` opens with `seen`'s bytes up to its last message, its array going on."""
    if value_start != seen.value_start or len(raw) <= seen.head_end:
        return False
    if not raw.startswith(memoryview(seen.raw)[: seen.head_end]):
        return False
    after = rawjson.space_end(raw, seen.head_end)
    return raw.startswith((b",", b"]"), after)
