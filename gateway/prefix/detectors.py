"""Find volatile values in the cacheable part of a request, cheaply enough for every request.

Costs, measured on the 2-core dev box: the regex pass is ~15-50 ms per MB (more where digits
are dense) and cannot be made much cheaper in Python, so it runs once per distinct content.
Hits are cached by the segment digest (already computed for the fingerprint), so an agent
that resends the same history every step pays only for what became history since its last
step; segments that repeat the closest earlier request are not even looked up (the caller
passes `start`). Segments larger than `WINDOW_BYTES` are scanned in windows cached by their
own digest: a timestamp that changes at the top of a 1 MB system prompt rescans one window.
A per-request byte budget bounds the worst case; whatever it skips is reported as
`unscanned` and scanned by a later request in which that segment is new or changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gateway.prefix.patterns import CANDIDATES, Hit, classify
from gateway.prefix.segments import RequestSegments, Segment, digest

WINDOW_BYTES = 32 * 1024
_LEFT_CONTEXT = 64
_RIGHT_CONTEXT = 256
MAX_HITS_PER_SEGMENT = 100
HOT_PATH_SCAN_BUDGET = 64 * 1024


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
    """A bounded LRU of content digest -> detector hits; safe to share between threads."""

    def __init__(self, max_entries: int = 65_536) -> None:
        self._entries: OrderedDict[bytes, tuple[Hit, ...]] = OrderedDict()
        self._max = max_entries
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

    def put(self, key: bytes, hits: tuple[Hit, ...]) -> None:
        """Remember the hits for `key`, evicting the least recently used entry when full."""
        with self._lock:
            self._entries[key] = hits
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)


class ScanBudget:
    """Bytes the regex may still read in this request; None means no limit.

    A scan goes ahead while any budget is left, so the last one may overshoot by at most
    one window: a budget smaller than a window still makes progress request by request.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.remaining = limit

    def take(self, size: int) -> bool:
        """Spend `size` bytes while any are left; return whether the scan may go ahead."""
        if self.remaining is None:
            return True
        if self.remaining <= 0:
            return False
        self.remaining = max(self.remaining - size, 0)
        return True


def scan_bytes(data: bytes, start: int = 0, end: int | None = None) -> list[Hit]:
    """Return the hits whose start lies in data[start:end] (the rest is context)."""
    stop = len(data) if end is None else end
    hits: list[Hit] = []
    for match in CANDIDATES.finditer(data, start, min(stop + _RIGHT_CONTEXT, len(data))):
        if match.start() >= stop:
            break
        hit = classify(data, match)
        if hit is not None and start <= hit.start < stop:
            hits.append(hit)
            if len(hits) >= MAX_HITS_PER_SEGMENT:
                break
    return hits


def scan_segment(segment: Segment, cache: ScanCache, budget: ScanBudget) -> tuple[Hit, ...] | None:
    """Return the segment's hits, from the cache where possible; None if over budget."""
    cached = cache.get(segment.digest)
    if cached is not None:
        return cached
    data = segment.data
    if len(data) <= WINDOW_BYTES:
        if not budget.take(len(data)):
            return None
        hits = tuple(scan_bytes(data))
    else:
        windowed = _scan_windows(data, cache, budget)
        if windowed is None:
            return None
        hits = windowed
    cache.put(segment.digest, hits)
    return hits


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
            cached = tuple(
                Hit(h.start - left, h.end - left, h.kind)
                for h in scan_bytes(view, start - left, end - left)
            )
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


def scan_request(
    request: RequestSegments,
    cache: ScanCache,
    budget: ScanBudget | None = None,
    start: int = 0,
) -> tuple[list[Finding], list[str]]:
    """Return the findings in the cacheable part and the names of segments left unscanned.

    The newest turn (the last user message and what follows it) is never scanned: it sits
    after every cached boundary, so nothing in it can break a cache read. Segments before
    `start` are skipped too: the caller knows them to repeat an earlier request verbatim.
    """
    spend = budget or ScanBudget()
    findings: list[Finding] = []
    unscanned: list[str] = []
    lookup = cache.get
    for segment in request.segments[start : request.stable_count]:
        hits = lookup(segment.digest)
        if hits is None:
            hits = scan_segment(segment, cache, spend)
        if hits is None:
            unscanned.append(segment.name)
        elif hits:
            findings.extend(to_findings(segment, hits))
    return findings, unscanned
