"""Find volatile values in the cacheable part of a request, cheaply enough for every request.

Costs, measured on the 2-core dev box: with the native locator (`locate.py`) a first-seen
megabyte of typical prompt text scans in ~0.4 ms, plus ~1 µs for each place the pattern
matches; without it, Python's regex alone costs 10-50 ms per MB. Either way the scan runs
once per distinct content: hits are cached by the segment digest (already computed for the
fingerprint), so an agent that resends the same history every step pays only for what
became history since its last step, and segments that repeat the closest earlier request
are not even looked up (the caller passes `start`). Segments larger than `WINDOW_BYTES`
are scanned in windows cached by their own digest: a timestamp that changes at the top of a
1 MB system prompt rescans one window. A per-request budget bounds the worst case (a
megabyte dense with dates or ids, or with number-like text the regex tries and rejects);
whatever it skips is reported as `unscanned` and scanned by a later request in which that
segment is new or changed. One scan (a window or a small segment) stops after
`MAX_TRIES_PER_SCAN` candidates, so no scan holds the CPU more than a few milliseconds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import compress, count, repeat
from operator import is_, is_not, itemgetter

from gateway.prefix.locate import (
    NATIVE,
    acyclic_list,
    attempts,
    flag_candidates,
    matches,
    untracked_tuple,
)
from gateway.prefix.patterns import Hit, classify
from gateway.prefix.segments import RequestSegments, Segment, digest

WINDOW_BYTES = 32 * 1024
_LEFT_CONTEXT = 64
_RIGHT_CONTEXT = 256
MAX_HITS_PER_SEGMENT = 100
# What one candidate the regex tries costs (~1.5 µs to confirm and classify a match, ~3 µs
# to reject one), in bytes of native scanning: rejected ones count too, or a table of
# two-digit numbers ("12 21 ...") scans for free at ~3 µs a number (683 ms for 2 MiB).
MATCH_COST_BYTES = 4096
# The candidates one scan on the request path tries at most (~6 ms): past that, a window is
# data too dense with number-like text to be a prompt header; what it found so far stands.
MAX_TRIES_PER_SCAN = 2048
# ~1 ms of scanning per request: 2 MiB natively, 64 KiB with Python's regex alone.
HOT_PATH_SCAN_BUDGET = 2 * 1024 * 1024 if NATIVE else 64 * 1024


class Severity(StrEnum):
    """How sure a finding is that it breaks prompt caching."""

    ERROR = "error"  # seen to change between requests of the same caller
    WARNING = "warning"  # looks volatile and sits in the cacheable part
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    """A volatile span: segment, character offset and length in the segment's JSON text."""

    segment: str
    offset: int
    length: int
    kind: str
    text: str
    severity: Severity = Severity.WARNING


class ScanCache:
    """A bounded LRU of content digest -> detector hits; safe to share between threads.

    Bounded in entries and in hits held: entries of a hundred hits each would otherwise
    let a stream of dense prompts pin hundreds of megabytes.
    """

    def __init__(self, max_entries: int = 65_536, max_hits: int = 262_144) -> None:
        self._entries: OrderedDict[bytes, tuple[Hit, ...]] = OrderedDict()
        self._max = max_entries
        self._max_hits = max_hits
        self._hits = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> tuple[Hit, ...] | None:
        """Return the cached hits for `key`, or None when it was never scanned."""
        # No lock on the read path, the hot one: each OrderedDict call is atomic under the
        # GIL, and a key evicted between the two calls only costs its LRU refresh.
        hits = self._entries.get(key)
        if hits is not None:
            try:  # noqa: SIM105 - contextlib.suppress costs more on this path
                self._entries.move_to_end(key)
            except KeyError:
                pass
        return hits

    def get_many(self, keys: Sequence[bytes]) -> list[tuple[Hit, ...] | None]:
        """`[self.get(key) for key in keys]`, in C-level maps (~0.1 µs a key, not ~0.25:
        a first-seen 1 MB prompt looks up ~1,250), each hit refreshed in the same order."""
        entries = self._entries
        found = list(map(entries.get, keys))
        hit = list(compress(keys, map(is_not, found, repeat(None))))
        try:
            deque(map(entries.move_to_end, hit), maxlen=0)
        except KeyError:  # one evicted meanwhile (see `get`): the rest one at a time
            for key in hit:
                try:  # noqa: SIM105 - as in `get`
                    entries.move_to_end(key)
                except KeyError:
                    pass
        return found

    def put(self, key: bytes, hits: tuple[Hit, ...]) -> None:
        """Remember the hits for `key`, evicting the least recently used entry when full."""
        self.put_many([(key, hits)])

    def put_many(self, items: Iterable[tuple[bytes, tuple[Hit, ...]]]) -> None:
        """Remember several scans under one lock (a first-seen prompt has hundreds)."""
        entries = self._entries
        with self._lock:
            for key, hits in items:
                replaced = entries.get(key)
                self._hits += len(hits) - (len(replaced) if replaced is not None else 0)
                entries[key] = hits
                entries.move_to_end(key)
            while entries and (len(entries) > self._max or self._hits > self._max_hits):
                self._hits -= len(entries.popitem(last=False)[1])


class ScanBudget:
    """Scanning this request may still do, in bytes read; None means no limit.

    Each candidate the regex tries, matched or rejected, is charged `MATCH_COST_BYTES` on
    top of the bytes, so content dense with candidates runs out sooner. A scan goes ahead
    while any budget is left, so the last one may overshoot by at most one scan (a window
    of `MAX_TRIES_PER_SCAN` tries): a small budget still makes progress request by request.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.remaining = limit

    def take(self, size: int) -> bool:
        """Spend `size` bytes while any are left; return whether the scan may go ahead."""
        if self.exhausted:
            return False
        if self.remaining is not None:
            self.remaining = max(self.remaining - size, 0)
        return True

    @property
    def exhausted(self) -> bool:
        """Whether nothing is left."""
        return self.remaining is not None and self.remaining <= 0

    def charge(self, tried: int) -> None:
        """Spend the cost of `tried` regex attempts (matches and rejections) after a scan."""
        if self.remaining is not None and tried:
            self.remaining = max(self.remaining - tried * MATCH_COST_BYTES, 0)


def scan_bytes(
    data: bytes, start: int = 0, end: int | None = None, *, native: bool = True
) -> list[Hit]:
    """Return the hits whose start lies in data[start:end] (the rest is context).

    `native=False` uses Python's regex alone, as when the native locator is not built.
    """
    return _scan(data, start, end, native=native)


def _scan(
    data: bytes,
    start: int = 0,
    end: int | None = None,
    budget: ScanBudget | None = None,
    *,
    native: bool = True,
) -> list[Hit]:
    """Return the hits in data[start:end], charging `budget` for each candidate tried."""
    stop = len(data) if end is None else end
    limit = min(stop + _RIGHT_CONTEXT, len(data))
    hits: list[Hit] = []
    tried = 0
    # Only a limited budget (the request path) counts tries and cuts a scan short; lint
    # reads everything, through the leaner loop that skips rejections silently.
    limited = budget is not None and budget.remaining is not None
    most = MAX_TRIES_PER_SCAN if limited else None
    found = attempts if limited else matches
    for match in found(data, start, stop, limit, native=native):
        if tried == most:
            break
        tried += 1
        if match is None:
            continue
        hit = classify(data, match)
        if hit is not None and start <= hit.start < stop:
            hits.append(hit)
            if len(hits) >= MAX_HITS_PER_SEGMENT:
                break
    if budget is not None:
        budget.charge(tried)
    return hits


def scan_segment(segment: Segment, cache: ScanCache, budget: ScanBudget) -> tuple[Hit, ...] | None:
    """Return the segment's hits, from the cache where possible; None if over budget."""
    cached = cache.get(segment.digest)
    if cached is not None:
        return cached
    hits = _scan_new(segment.data, cache, budget)
    if hits is not None:
        cache.put(segment.digest, hits)
    return hits


def _scan_new(data: bytes, cache: ScanCache, budget: ScanBudget) -> tuple[Hit, ...] | None:
    """Scan a segment the cache does not know; None if over budget."""
    if len(data) > WINDOW_BYTES:
        return _scan_windows(data, cache, budget)
    if not budget.take(len(data)):
        return None
    return tuple(_scan(data, budget=budget))


def _scan_windows(data: bytes, cache: ScanCache, budget: ScanBudget) -> tuple[Hit, ...] | None:
    hits: list[Hit] = []
    complete = True
    for start in range(0, len(data), WINDOW_BYTES):
        end = min(start + WINDOW_BYTES, len(data))
        left = max(start - _LEFT_CONTEXT, 0)
        # The window's key covers its context too: a hit may depend on the bytes around it.
        view = data[left : end + _RIGHT_CONTEXT]
        key = b"w" + digest(view)
        cached = cache.get(key)
        if cached is None:
            if not budget.take(end - start):
                complete = False
                continue
            found = _scan(view, start - left, end - left, budget)
            cached = tuple(Hit(h.start - left, h.end - left, h.kind) for h in found)
            cache.put(key, cached)
        hits.extend(Hit(h.start + left, h.end + left, h.kind) for h in cached)
    return tuple(hits[:MAX_HITS_PER_SEGMENT]) if complete else None


def to_findings(segment: Segment, hits: Iterable[Hit]) -> list[Finding]:
    """Turn byte hits into findings with character offsets into the segment's text."""
    data = segment.data
    ascii_only = data.isascii()
    findings = []
    for hit in hits:
        text = data[hit.start : hit.end].decode("utf-8", "replace")
        offset = hit.start if ascii_only else len(data[: hit.start].decode("utf-8", "replace"))
        findings.append(Finding(segment.name, offset, len(text), hit.kind, text))
    return findings


_DIGEST = itemgetter(3)  # Segment.digest, in C


def scan_request(
    request: RequestSegments,
    cache: ScanCache,
    budget: ScanBudget | None = None,
    start: int = 0,
    clean: range = range(0),
) -> tuple[list[Finding], list[str]]:
    """Return the findings in the cacheable part and the names of segments left unscanned.

    The newest turn (the last user message and what follows it) is never scanned: it sits
    after every cached boundary, so nothing in it can break a cache read. Segments before
    `start` are skipped too: the caller knows them to repeat an earlier request verbatim.
    Segments at the positions in `clean` are known to hold nothing (`CleanRuns`): they are
    not looked up.
    """
    if start >= request.stable_count:  # nothing cacheable is new (a small request's header)
        return [], acyclic_list()
    spend = budget or ScanBudget()
    # One entry per segment each, out of cyclic GC (see `acyclic_list`): else the
    # collections meanwhile walk 466,000 items apiece, on the event loop's thread too.
    segments = untracked_tuple(request.segments, start, request.stable_count)
    known: list[tuple[Hit, ...] | None] = acyclic_list()
    low = min(max(clean.start - start, 0), len(segments))
    high = min(max(clean.stop - start, low), len(segments))
    if low < high:  # only the segments around the clean run are looked up
        looked = cache.get_many([*map(_DIGEST, segments[:low]), *map(_DIGEST, segments[high:])])
        if None not in looked and not any(looked):
            return [], acyclic_list()
        known += looked[:low]
        known += repeat((), high - low)
        known += looked[low:]
    else:
        known += cache.get_many(list(map(_DIGEST, segments)))
        if None not in known and not any(known):  # all seen, none holds anything: most
            return [], acyclic_list()
    small: list[int] = acyclic_list()
    first_of: dict[bytes, int] = {}  # repeats within the request ("null" settings) scan once
    repeats: list[tuple[int, int]] = []
    # Only the segments the cache did not know (a first-seen prompt's system prompt, say),
    # found in C: a Python pass over a 1 MB prompt's 1,245 segments took ~0.1 ms.
    for index in list(compress(count(), map(is_, known, repeat(None)))):
        segment = segments[index]
        if segment.digest in first_of:
            repeats.append((index, first_of[segment.digest]))
        elif len(segment.data) > WINDOW_BYTES:
            known[index] = _scan_windows(segment.data, cache, spend)
        elif spend.take(len(segment.data)):
            first_of[segment.digest] = index
            small.append(index)
    _scan_small(segments, small, known, spend)
    cache.put_many((segments[i].digest, hits) for i in small if (hits := known[i]) is not None)
    for index, first in repeats:
        known[index] = known[first]
    findings: list[Finding] = []
    for index in compress(count(), known):  # those with hits, in order
        findings.extend(to_findings(segments[index], known[index]))  # type: ignore[arg-type]
    unscanned: list[str] = acyclic_list()
    unscanned += (segments[i].name for i in compress(count(), map(is_, known, repeat(None))))
    return findings, unscanned


def _scan_small(
    segments: Sequence[Segment],
    small: list[int],
    known: list[tuple[Hit, ...] | None],
    spend: ScanBudget,
) -> None:
    """Scan the small new segments: one native pass says which could hold anything at all.

    Typically few can, and only those go through the regex, while budget remains.
    """
    for index in small:
        known[index] = ()
    datas: list[bytes] = acyclic_list()
    datas += (segments[index].data for index in small)
    for flagged in flag_candidates(datas):
        index = small[flagged]
        if spend.exhausted:  # earlier matches used it up: leave the rest for later
            known[index] = None
            continue
        known[index] = tuple(_scan(segments[index].data, budget=spend))
