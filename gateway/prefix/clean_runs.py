"""Which recent requests' cacheable segments were all scanned and held nothing.

A caller whose system prompt changes every request (a session id, the date) resends the
rest of its prompt byte for byte: the check breaks at the system segment, so every segment
after it is new to the comparison and went to the scan cache, ~0.3 ms of lookups for a
1 MB prompt's 1,245 segments, though the closest earlier request had just found each of
them clean. A segment's hits are a function of its bytes (its digest: the scan cache's key
too), so where the closest request's segments were all scanned and held nothing, the
segments that repeat them at the same positions hold nothing either, without a lookup.

Only runs that were scanned whole and found clean are kept (no finding, nothing left
unscanned for the budget), by the record's segment digests (compared by value, so a record
rebuilt from the store finds its run too), for a bounded number of recent records. Where a
kept segment's cache entry was evicted since, the answer is still the scan's own: a scan
is a function of the bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from gateway.prefix.record import PrefixRecord

# Runs shorter than this are not kept: a small request's lookups cost less than the keeping.
MIN_RUN = 64
MAX_RECORDS = 64
# Digests held by all the kept runs, ~90 bytes each (~1.5 MB at most): thirteen 1 MB
# prompts' records, most of them still in their callers' histories anyway.
MAX_SEGMENTS = 16 * 1024


Key = tuple[int, tuple[str, ...], str, str]


def _key(record: PrefixRecord) -> Key:
    """A few of `record`'s digests: its count, its header and first message (where a fresh
    prompt differs), its middle and its newest turn. Hashing all of a 1 MB prompt's 1,245
    new ones took ~20 µs a request: the kept digests are compared whole instead."""
    digests = record.segment_digests
    return (
        len(digests),
        digests[: record.header_count + 1],
        digests[len(digests) // 2],
        digests[-1],
    )


class CleanRuns:
    """A bounded LRU of records' segment digests -> the range of them scanned and clean.

    Two records alike in their key share an entry: the newest kept (usually the next
    request's closest) holds it, and the other's requests look their segments up.
    """

    def __init__(self, max_records: int = MAX_RECORDS, max_segments: int = MAX_SEGMENTS) -> None:
        self._runs: OrderedDict[Key, tuple[tuple[str, ...], int, int]] = OrderedDict()
        self._max_records = max_records
        self._max_segments = max_segments
        self._held = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._runs)

    def keep(self, record: PrefixRecord, start: int, stop: int) -> None:
        """Remember that `record`'s segments `start..stop-1` were all scanned, none with a hit."""
        digests = record.segment_digests
        if stop - start < MIN_RUN or len(digests) > self._max_segments:
            return
        key = _key(record)
        with self._lock:
            replaced = self._runs.pop(key, None)
            if replaced is not None:
                self._held -= len(replaced[0])
            self._runs[key] = (digests, start, stop)
            self._held += len(digests)
            while len(self._runs) > self._max_records or self._held > self._max_segments:
                self._held -= len(self._runs.popitem(last=False)[1][0])

    def run_of(self, closest: PrefixRecord) -> range:
        """The positions of `closest`'s segments scanned whole and found clean (empty if
        not kept): a later request's segments that repeat them there hold nothing either."""
        digests = closest.segment_digests
        if len(digests) < MIN_RUN:
            return range(0)
        key = _key(closest)
        run = self._runs.get(key)
        # The same tuple where the record is the one kept (the in-process history); else
        # compared whole: a record rebuilt from the store, or another alike in its key.
        if run is None or (run[0] is not digests and run[0] != digests):
            return range(0)
        try:  # noqa: SIM105 - as `ScanCache.get`: evicted meanwhile costs only the refresh
            self._runs.move_to_end(key)
        except KeyError:
            pass
        return range(run[1], run[2])
