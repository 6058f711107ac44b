"""Reuse a caller's previous parse for the messages its next large body repeats, in place.

A fresh prompt (a per-request system prompt, then the conversation the caller sent last
time) repeats ~1,243 of its 1,245 messages byte for byte, but not as a byte *prefix* of
the body: its first message changed. `SegmentReuse` matches a task's body by prefix only,
so orjson built every message again (~1 ms per MB) and freeing them cost ~0.3-0.5 ms more.

Here the previous body's message spans are kept with its parsed messages. A new body's
message array is walked without validation (`rawjson.trusted_children`, ~0.1 ms per MB),
and one run of messages, at the same indices as in the previous body, whose bytes (and
the separators between them) equal that body's, is cut out (one memcmp); only the rest is
parsed, and the kept values go back in at the run's index (`Run`).

Why that is exact: the walk decides where a message starts from the bytes before it
alone, and it is exact on valid JSON. If the rest (the body without the run) is valid,
the walk's view of the bytes before the cut is the parser's, so the cut lies at a value
position of the `messages` array; putting back bytes that are, verbatim, a sequence of
complete JSON values with their separators (they were the previous body's messages)
keeps the text valid and inserts exactly those values there. If the rest is not valid,
the whole body is parsed for its own error. The values are shared with the previous
request, so they are kept only where nothing changes them (see `keep`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway import rawjson
from gateway.prefix.rawcut import messages_start
from gateway.prefix.segments import Known, RequestSegments, leading_system_count

MIN_BYTES = 64 * 1024
"""Bodies under this are parsed whole: walking them costs about what it saves."""
MIN_RUN_BYTES = 32 * 1024
"""A run shorter than this is not cut out: the copy of the rest costs about as much."""
KEEP_BYTES = 8 * 1024 * 1024
"""The kept bodies' bytes in all. A kept 1 MB fresh prompt holds ~2.5 MiB with its parsed
messages and its cut (tracemalloc), so this bounds the whole at ~20 MiB."""
MAX_BODY_BYTES = 2 * 1024 * 1024
"""A body over this is not kept: the pipeline takes such bodies apart when they end."""
EDGE = 4
"""How many messages at each end may differ from the kept body's (a new system prompt,
a new last turn) before the run is looked for no further."""
_MEMO = 8  # bodies whose walk is kept between their parse and their `keep`


@dataclass(frozen=True, slots=True)
class _Kept:
    """One caller's previous large body, its message spans and its parsed messages."""

    raw: bytes
    spans: memoryview  # int64 (start, value start, end) triples, one per message
    parsed: tuple[Any, ...]  # its messages as parsed: shared, never changed
    request: RequestSegments | None = None  # its prefix check's cut (`checked`), if known


@dataclass(frozen=True, slots=True)
class Run:
    """Messages a body repeats of its key's previous one: cut `raw[start:end]` out,
    parse the rest, and put `values` back at `index` of its messages."""

    start: int
    end: int
    index: int
    values: tuple[Any, ...]
    remaining: int  # how many messages the rest has


class MessageReuse:
    """The latest large body of each key, to parse the next one's repeated messages once."""

    def __init__(
        self, keep_bytes: int = KEEP_BYTES, min_bytes: int = MIN_BYTES, min_run: int = MIN_RUN_BYTES
    ) -> None:
        self.keep_bytes = keep_bytes
        self.min_bytes = min_bytes
        self.min_run = min_run
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()  # a large request's check runs in a worker thread
        self._walks: OrderedDict[int, tuple[bytes, memoryview | None]] = OrderedDict()
        self._shared: OrderedDict[int, bytes] = OrderedDict()
        # Bodies' runs, from their parse to their check (`known`), and cuts, to their `keep`
        self._runs: OrderedDict[int, tuple[bytes, _Kept, int, int]] = OrderedDict()
        self._cuts: OrderedDict[int, tuple[bytes, RequestSegments]] = OrderedDict()

    def run(self, key: str, raw: bytes) -> Run | None:
        """The longest run of `raw`'s messages that repeat, at the same indices and byte
        for byte, `key`'s previous body's (at most `EDGE` differing at each end); None.

        `raw` need not have been parsed: see the module's docstring for why a rest that
        parses makes the run exact.
        """
        if not self.min_bytes <= len(raw) <= MAX_BODY_BYTES or type(raw) is not bytes:
            return None
        with self._lock:
            kept = self._kept.get(key)
        if kept is None:
            return None
        spans = self._walk(raw)
        if spans is None:
            return None
        old = kept.spans
        count = len(spans) // 3
        common = min(count, len(old) // 3)
        first = next((i for i in range(min(common, EDGE)) if _same(raw, spans, kept, i)), None)
        if first is None:
            return None
        last = next(
            (
                i
                for i in range(common - 1, max(first, common - 1 - EDGE), -1)
                if _same(raw, spans, kept, i)
            ),
            first,
        )
        start, end = spans[3 * first], spans[3 * last + 2]
        old_start, old_end = old[3 * first], old[3 * last + 2]
        if end - start != old_end - old_start or end - start < self.min_run:
            return None
        if not raw.startswith(memoryview(kept.raw)[old_start:old_end], start):
            return None
        if last + 1 < count:  # cut up to the next message: `[a, <run>, e]` -> `[a, e]`
            end = spans[3 * (last + 1)]
        elif first > 0:  # the run ends the array: cut from the message before it
            start, end = spans[3 * (first - 1) + 2], end
        values = kept.parsed[first : last + 1]
        _remember(self._lock, self._runs, id(raw), (raw, kept, first, last))
        return Run(start, end, first, values, count - len(values))

    def known(self, raw: bytes, messages: list[Any]) -> Known | None:
        """The segments of `raw`'s messages that its parse took from its key's previous
        body (`run`), as that body's prefix check cut them; None where there are none.

        A message's segment is a function of its index and its parsed value (its bytes),
        so the repeated run's segments are the previous body's, when the run covers every
        message from the first after the leading system ones (which go in the headers) and
        both bodies have as many of those.
        """
        with self._lock:
            found = self._runs.pop(id(raw), None)
        if found is None or found[0] is not raw:
            return None
        _, kept, first, last = found
        request = kept.request
        if request is None:
            return None
        system = leading_system_count(messages)
        cut = request.segments[request.header_count :]
        if first > system or last < system or len(kept.parsed) - len(cut) != system:
            return None
        return Known(last + 1, system, cut[: last + 1 - system])

    def checked(self, raw: bytes, request: RequestSegments) -> None:
        """Note the prefix check's cut of `raw`, for its `keep` (the next body's `known`)."""
        if self.min_bytes <= len(raw) <= MAX_BODY_BYTES:
            _remember(self._lock, self._cuts, id(raw), (raw, request))

    def shared(self, raw: bytes) -> None:
        """Note that `raw`'s parse took messages kept for another request (`is_shared`)."""
        _remember(self._lock, self._shared, id(raw), raw)

    def is_shared(self, raw: bytes) -> bool:
        """Whether `raw`'s parsed messages include values shared with other requests."""
        with self._lock:
            return self._shared.get(id(raw)) is raw

    def release(self, raw: bytes) -> bool:
        """Drop what is noted of `raw` between its parse and its check (after `keep`);
        whether its parse shared values. The notes hold bodies: a request's are dropped at
        its check, not left to the next eight."""
        with self._lock:
            for memo in (self._walks, self._runs, self._cuts):
                memo.pop(id(raw), None)
            return self._shared.pop(id(raw), None) is raw

    def forget_body(self, key: str, raw: bytes) -> None:
        """Drop what is kept for `key` if it is `raw` (a request sending it where it may be
        changed, after it was kept)."""
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and kept.raw is raw:
            self.forget(key)

    def keep(self, key: str, raw: bytes, messages: list[Any]) -> None:
        """Keep `raw` (parsed into `messages`, which nothing will change) as `key`'s latest."""
        if not self.min_bytes <= len(raw) <= MAX_BODY_BYTES or type(raw) is not bytes:
            return
        spans = self._walk(raw, last=True)
        if spans is None or len(spans) != 3 * len(messages):
            self.forget(key)
            return
        with self._lock:
            cut = self._cuts.pop(id(raw), None)
        request = cut[1] if cut is not None and cut[0] is raw else None
        kept = _Kept(raw, spans, tuple(messages), request)
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._held -= len(old.raw)
            self._kept[key] = kept
            self._held += len(raw)
            while self._held > self.keep_bytes:
                _, dropped = self._kept.popitem(last=False)
                self._held -= len(dropped.raw)

    def forget(self, key: str) -> None:
        """Drop what is kept for `key`."""
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._held -= len(old.raw)

    def _walk(self, raw: bytes, last: bool = False) -> memoryview | None:
        """The spans of `raw`'s messages (trusted walk), kept from its parse to its `keep`."""
        with self._lock:
            memo = self._walks.pop(id(raw), None) if last else self._walks.get(id(raw))
        if memo is not None and memo[0] is raw:
            return memo[1]
        spans: memoryview | None = None
        try:  # a body not parsed yet may hold anything: a bad key's decoding raises too
            start = messages_start(raw)
            if start is not None:
                spans = rawjson.trusted_children(raw, start)[0]
        except (ValueError, RuntimeError):
            spans = None
        if not last:
            with self._lock:
                self._walks[id(raw)] = (raw, spans)
                while len(self._walks) > _MEMO:
                    self._walks.popitem(last=False)
        return spans


def _same(raw: bytes, spans: memoryview, kept: _Kept, index: int) -> bool:
    """Whether message `index` of `raw` has the bytes of the kept body's message `index`."""
    start, end = spans[3 * index], spans[3 * index + 2]
    old_start, old_end = kept.spans[3 * index], kept.spans[3 * index + 2]
    return end - start == old_end - old_start and raw.startswith(
        memoryview(kept.raw)[old_start:old_end], start
    )


def _remember(lock: threading.Lock, memo: OrderedDict[int, Any], key: int, value: Any) -> None:
    """Put `value` in `memo`, keeping its newest `_MEMO` entries (bodies in flight)."""
    with lock:
        memo[key] = value
        while len(memo) > _MEMO:
            memo.popitem(last=False)
