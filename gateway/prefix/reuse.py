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
cut costs less than the bookkeeping). The same match serves the parse (`repeated`), the
weighing (`unseen`) and the cut (`split`) of one body: it is found once per body, not
once per caller (each is a scan for `messages` and a memcmp of the megabyte).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway import rawjson
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.message_reuse import MessageReuse
from gateway.prefix.rawcut import messages_start, raw_messages
from gateway.prefix.segments import Known, RequestSegments, split_request

MIN_BYTES = 64 * 1024
KEEP_BYTES = 32 * 1024 * 1024
# A body over this is not kept: comparing it would cost more than its share of the keep.
MAX_BODY_BYTES = KEEP_BYTES // 4
# Where the last this-many messages of a request ended: the next step may replace a few.
KEEP_ENDS = 4
# Bodies whose match is kept between the parse and the cut of their request (`_survey`):
# at most this many, and only bodies up to SURVEY_BYTES (a larger one is surveyed again).
SURVEYS = 16
SURVEY_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Seen:
    """One earlier request of a key: its body and where its last messages ended."""

    raw: bytes  # the body itself, kept (not copied) to compare the next one against
    value_start: int  # where its `messages` array opened
    ends: tuple[tuple[int, int], ...]  # (offset past message i, i + 1), the last few, longest first
    known: Known  # the segments of all its messages
    # What the parse validated its messages into, one per message, when the caller gave
    # them (the next step's parse reuses those its bytes repeat); read-only, shared
    validated: tuple[Any, ...] | None = None
    # Its messages as parsed (the very values of its body), kept with `validated` when the
    # caller says nothing will change them: the next step's parse takes those it repeats
    parsed: tuple[Any, ...] | None = None
    record: Any = None  # its PrefixRecord (`keep_record`): the next one's repeated columns


@dataclass(frozen=True, slots=True)
class Repeat:
    """The leading messages a body repeats, byte for byte, of its key's previous request."""

    value_start: int  # where the body's (and that request's) `messages` array opens
    end: int  # the offset just past the last repeated message
    count: int  # how many messages are repeated
    validated: tuple[Any, ...] | None  # what the parse made of them then (shared)
    parsed: tuple[Any, ...] | None  # their parsed values then (shared), see `_Seen.parsed`


@dataclass(frozen=True, slots=True)
class _Survey:
    """What one body repeats of one key's request: kept for the body's next caller."""

    raw: bytes  # the body (its identity is the memo's key)
    seen: _Seen | None  # the key's request it was compared with
    value_start: int | None
    match: tuple[int, int] | None  # (end, count) as `_longest_repeat` finds it


class SegmentReuse:
    """The latest large request of each key, to cut the next one's repeated messages once."""

    def __init__(self, keep_bytes: int = KEEP_BYTES, min_bytes: int = MIN_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.min_bytes = min_bytes
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()  # a body over 2 MiB is checked in a worker thread
        self._surveys: OrderedDict[tuple[str, int], _Survey] = OrderedDict()
        # Large bodies without a task: their callers' next parse (`_parse_sharing`)
        self.messages = MessageReuse()

    def _survey(self, key: str, raw: bytes, last: bool = False) -> _Survey:
        """Where `raw`'s messages open and what it repeats of `key`'s latest request.

        Found once per body and key, and kept (`SURVEYS` bodies) until its cut (`last`):
        the parse, the weighing and the cut of one request each asked for it, three scans
        and three memcmps of the same megabyte. Recomputed when the key's request changed
        meanwhile, so every caller sees what it would have found itself.
        """
        memo = (key, id(raw))
        with self._lock:
            seen = self._seen.get(key)
            survey = self._surveys.pop(memo, None) if last else self._surveys.get(memo)
        if survey is not None and survey.raw is raw and survey.seen is seen:
            return survey
        value_start = messages_start(raw) if len(raw) >= self.min_bytes else None
        match = None
        if seen is not None and value_start is not None:
            match = _longest_repeat(seen, raw, value_start)
        survey = _Survey(raw, seen, value_start, match)
        if not last and len(raw) <= SURVEY_BYTES:
            with self._lock:
                self._surveys[memo] = survey
                while len(self._surveys) > SURVEYS:
                    self._surveys.popitem(last=False)
        return survey

    def split(
        self,
        key: str,
        raw: bytes,
        body: Mapping[str, Any],
        rule: CacheRule,
        validated: Sequence[Any] | None = None,
        keep_parsed: bool = False,
        like: list[tuple[Any, int]] | None = None,
    ) -> RequestSegments:
        """`split_request(body, rule)`, reusing what `key`'s previous request cut.

        `body` must be `raw` parsed (its `messages` unedited); `validated`, one item per
        message, is kept for the next request's `validated_prefix` (not copied when a
        tuple: never change what is handed in). With `keep_parsed`, the body's messages
        themselves are kept beside it, for the next request's parse (`repeated`): only
        where nothing changes them, in this request or later. `like`, when given, gets
        the previous request's record (`keep_record`) and how many message segments
        after the headers were taken from it, for `build_record`.
        """
        if not keep_parsed:
            self.forget_parsed(key)  # this request may change them: the next parses whole
        survey = self._survey(key, raw, last=True)
        seen, value_start, match = survey.seen, survey.value_start, survey.match
        messages = body.get("messages")
        if value_start is None or not isinstance(messages, list):
            return split_request(body, rule)
        known = None
        if seen is not None and match is not None:
            end, count = match
            system = seen.known.system
            if count >= system:
                known = Known(count, system, seen.known.segments[: count - system])
                if like is not None and seen.record is not None:
                    like.append((seen.record, count - system))
            ends = [(e, c) for e, c in seen.ends if e <= end]
        else:
            end, count, ends = value_start, 0, []
        try:
            # `raw` was parsed: its new messages are skipped, not validated again
            spans = rawjson.trusted_children(raw, end, None if count == 0 else False)[0]
        except rawjson.RawJsonError:
            return split_request(body, rule, known)
        ends = [
            (e, c) for e, c in zip(spans[2::3], range(count + 1, len(messages) + 1), strict=False)
        ] + ends
        ends.sort(reverse=True)
        # Nothing repeated (a task's first sight): the messages' own bytes, where canonical
        pieces = raw_messages(raw, messages, value_start) if known is None else None
        request = split_request(body, rule, known, pieces)
        if ends and ends[0][1] == len(messages):
            system = len(messages) - (len(request.segments) - request.header_count)
            kept = Known(len(messages), system, request.segments[request.header_count :])
            shared = parsed = None
            if validated is not None and len(validated) == len(messages):
                shared = validated if isinstance(validated, tuple) else tuple(validated)
                parsed = tuple(messages) if keep_parsed else None
            last = tuple(ends[:KEEP_ENDS])
            self._keep(key, _Seen(raw, value_start, last, kept, shared, parsed))
        return request

    def validated_prefix(self, key: str, raw: bytes) -> tuple[Any, ...]:
        """What `key`'s previous request's leading messages that `raw` repeats byte for
        byte were validated into (as handed to `split`); () when none.

        `raw` must have been parsed as JSON already (its values are skipped, not checked).
        A message's validated value depends on its parsed value alone, and that on its
        bytes, so these are what validating `raw`'s first messages would give.
        """
        repeat = self.repeated(key, raw)
        if repeat is None or repeat.validated is None:
            return ()
        return repeat.validated[: repeat.count]

    def repeated(self, key: str, raw: bytes) -> Repeat | None:
        """What `raw`'s leading messages repeat, byte for byte, of `key`'s previous request
        (and what that request's parse made of them, as far as it was kept); None if none.

        `raw` must have been parsed as JSON already, or be parsed before its values are
        trusted: values are skipped here, not checked.
        """
        if len(raw) < self.min_bytes:
            return None
        with self._lock:
            if key not in self._seen:
                return None
        survey = self._survey(key, raw)
        if survey.seen is None or survey.value_start is None or survey.match is None:
            return None
        end, count = survey.match
        seen = survey.seen
        return Repeat(survey.value_start, end, count, seen.validated, seen.parsed)

    def unseen(self, key: str, raw: bytes) -> int:
        """How many bytes of `raw` follow what `key`'s previous request showed (all if none)."""
        with self._lock:
            seen = self._seen.get(key)
        if seen is None:
            return len(raw)
        if len(raw) >= self.min_bytes:
            survey = self._survey(key, raw)
            if survey.seen is seen and survey.match is not None:
                return len(raw) - survey.match[0]
        for end, _ in seen.ends:
            if len(raw) > end and raw.startswith(memoryview(seen.raw)[:end]):
                return len(raw) - end
        return len(raw)

    def keep_record(self, key: str, raw: bytes, record: Any) -> None:
        """Keep `record`, built of `raw`'s segments, beside `raw` if it is `key`'s latest."""
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and seen.raw is raw:
                self._seen[key] = dataclasses.replace(seen, record=record)

    def forget_parsed(self, key: str) -> None:
        """Drop the parsed messages kept for `key`: a request of it sends them where they
        may be changed (litellm), so the next step parses its own."""
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and seen.parsed is not None:
                self._seen[key] = dataclasses.replace(seen, parsed=None)

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


def _longest_repeat(seen: _Seen, raw: bytes, value_start: int) -> tuple[int, int] | None:
    """The longest of `seen`'s message ends up to which `raw` has its bytes (and the count).

    Compared byte for byte (memcmp); the array must go on after it (`,` or `]`).
    """
    if value_start != seen.value_start:
        return None
    for end, count in seen.ends:
        if len(raw) <= end or not raw.startswith(memoryview(seen.raw)[:end]):
            continue
        if raw.startswith((b",", b"]"), rawjson.space_end(raw, end)):
            return end, count
    return None
