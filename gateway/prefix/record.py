"""The fingerprint chain of one request, as a plain value the history store can keep.

Fingerprint `i` covers segments `0..i` (and the family and model), so two requests share a
cacheable prefix exactly as far as their fingerprints agree. The chain is built from the
per-segment digests on first use: the hot path compares digests position by position,
which gives the same answer, and a 400-message chain costs ~0.4 ms to hash on the dev box.
The store (Redis or in-process) is not this package's business: it keeps
`PrefixRecord.to_dict()` and hands records back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import itemgetter
from typing import Any

import xxhash

from gateway.frozen import mutable_twin
from gateway.prefix.cache_rules import CacheMode, CacheRule
from gateway.prefix.locate import acyclic_list, moved_tuple, native_step
from gateway.prefix.segments import DIGEST_SIZE, RequestSegments, SegmentKind

TokenCounter = Callable[[bytes], int]
_BREAKPOINT_KINDS = (SegmentKind.TOOLS, SegmentKind.SYSTEM, SegmentKind.MESSAGE)
_SETTING_PREVIEW = 200
# Records up to this many segments start their chain from an earlier record's (see
# `PrefixRecord.share_chain`): the pipeline stores those (MAX_REMEMBERED_SEGMENTS).
SHARED_CHAIN_MAX = 8192


def estimate_tokens(data: bytes) -> int:
    """Estimate the tokens of `data` as a quarter of its bytes, rounded up."""
    return (len(data) + 3) // 4


@dataclass(frozen=True, slots=True)
class PrefixRecord:
    """One request's segment digests, token estimates and cache breakpoints."""

    family: str
    model: str
    segment_names: tuple[str, ...]
    segment_digests: tuple[str, ...]
    canonical_digests: tuple[str, ...]
    cumulative_tokens: tuple[int, ...]
    stable_count: int
    header_count: int
    breakpoints: tuple[int, ...] = ()
    settings: Mapping[str, str] = field(default_factory=dict)
    # The prompt size the provider reported for this request (0: not known), which turns
    # the next request's byte estimates into the provider's own token counts.
    reported_prompt_tokens: int = 0
    _chain: list[tuple[str, ...]] = field(default_factory=list, repr=False, compare=False)

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """Return the hex fingerprint of every prefix, segment by segment."""
        if not self._chain:
            self._chain.append(chain_fingerprints(self.family, self.model, self.segment_digests))
        return self._chain[0]

    def share_chain(self, earlier: PrefixRecord, shared: int) -> None:
        """Start this record's chain with `earlier`'s first `shared` fingerprints.

        Fingerprint i covers segments 0..i, family and model: where both records have the
        same family, model and first `shared` digests (checked here, in C), those
        fingerprints are equal, and only the rest is hashed. An agent step repeats all
        but its last few segments (1,245 of a 1 MB step: ~0.2 ms). Only when `earlier`'s
        chain is already made (a stored record brings it) and this one's is not, and up to
        `SHARED_CHAIN_MAX` segments (the records the pipeline stores, so whose chain it
        makes anyway: a longer one may never need it). Nor when less than half is shared
        (a fresh system prompt): nothing on the request path reads the chain (only the
        `sticky_cache_key` action), so it is left to its first reader, the store's
        `to_dict` after the reply, not hashed before the call (~0.07 ms for 1,245).
        """
        if self._chain or not earlier._chain or shared <= 0:
            return
        if shared * 2 < len(self.segment_digests):  # little to share: left to its reader
            return
        if len(self.segment_digests) > SHARED_CHAIN_MAX:
            return
        if (self.family, self.model) != (earlier.family, earlier.model):
            return
        if shared > len(earlier.segment_digests) or shared > len(self.segment_digests):
            return
        if self.segment_digests[:shared] != earlier.segment_digests[:shared]:
            return
        known = earlier._chain[0][:shared]
        rest = self.segment_digests[shared:]
        self._chain.append(known + chain_fingerprints(self.family, self.model, rest, known[-1]))

    @property
    def total_tokens(self) -> int:
        """Return the estimated size of the whole prompt."""
        return self.cumulative_tokens[-1] if self.cumulative_tokens else 0

    @property
    def head_fingerprint(self) -> str:
        """Return the fingerprint after the header (tools, system, settings): one per agent."""
        if not self.segment_digests or self.header_count == 0:
            return ""
        return self.fingerprints[min(self.header_count, len(self.segment_digests)) - 1]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict for the history store."""
        # One length for all the columns; a small record's are plain lists (most requests).
        stored = list if len(self.segment_digests) <= SMALL_COLUMN else _untracked_list
        return {
            "family": self.family,
            "model": self.model,
            "fingerprints": stored(self.fingerprints),
            "segment_names": stored(self.segment_names),
            "segment_digests": stored(self.segment_digests),
            "canonical_digests": stored(self.canonical_digests),
            "cumulative_tokens": stored(self.cumulative_tokens),
            "stable_count": self.stable_count,
            "header_count": self.header_count,
            "breakpoints": list(self.breakpoints),
            "settings": dict(self.settings),
            "reported_prompt_tokens": self.reported_prompt_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrefixRecord:
        """Rebuild a record from `to_dict()` output."""
        # Columns through C-level maps, not generators (a record read back from Redis,
        # once per record: ~7 µs for a small one with generators and keywords).
        settings = data.get("settings", {})
        record = (_BUILD if cls is PrefixRecord else cls)(
            family=str(data["family"]),
            model=str(data["model"]),
            segment_names=tuple(data["segment_names"]),
            segment_digests=tuple(data["segment_digests"]),
            canonical_digests=tuple(data["canonical_digests"]),
            cumulative_tokens=tuple(map(int, data["cumulative_tokens"])),
            stable_count=int(data["stable_count"]),
            header_count=int(data["header_count"]),
            breakpoints=tuple(map(int, data.get("breakpoints", ()))),
            settings={} if settings == {} else {str(k): str(v) for k, v in dict(settings).items()},
            reported_prompt_tokens=int(data.get("reported_prompt_tokens") or 0),
        )
        stored = data.get("fingerprints")
        if isinstance(stored, list) and len(stored) == len(record.segment_digests):
            record._chain.append(tuple(map(str, stored)))
        return record


def _untracked_list(column: tuple[Any, ...]) -> list[Any]:
    """`list(column)` out of cyclic GC, for a long stored column: it holds strings or ints,
    never a container, and the history keeps it for minutes, where each collection walked
    it (a young one ~25 µs for a 1 MB prompt's five columns of 1,245; then the older ones)."""
    stored = acyclic_list()
    stored += column
    return stored


_BUILD = mutable_twin(PrefixRecord)
"""`PrefixRecord(...)` a store per field (see `gateway.frozen`): a request builds one or two,
~3 µs each through the frozen `__init__` of twelve fields on the slow box, ~1 µs so."""


def with_reported_tokens(record: PrefixRecord, prompt_tokens: int) -> PrefixRecord:
    """`dataclasses.replace(record, reported_prompt_tokens=prompt_tokens)`, without its
    generic walk over the fields (~10 µs here): the same fields, the chain list shared."""
    return _BUILD(
        record.family,
        record.model,
        record.segment_names,
        record.segment_digests,
        record.canonical_digests,
        record.cumulative_tokens,
        record.stable_count,
        record.header_count,
        record.breakpoints,
        record.settings,
        prompt_tokens,
        record._chain,
    )


def chain_seed(family: str, model: str) -> bytes:
    """Return the start of the chain: a prompt cache never crosses families or models."""
    return hashlib.sha256(f"farebox-prefix/1\0{family}\0{model}".encode()).digest()[:DIGEST_SIZE]


def chain_fingerprints(
    family: str, model: str, digests: Sequence[str], after: str | None = None
) -> tuple[str, ...]:
    """Return fingerprint i = H(fingerprint i-1 + digest i) for every segment, as hex.

    `after`: the fingerprint (hex) of the segments before `digests`; else they are first.
    """
    previous = bytes.fromhex(after) if after is not None else chain_seed(family, model)
    xxh3 = xxhash.xxh3_128_digest
    if _CHAIN_HEX is not None and len(previous) == DIGEST_SIZE and type(digests) in (list, tuple):
        # The loop below in C (~0.15 µs a link, not ~0.6), calling xxh3 itself; None when
        # a digest is not 32 hex digits (a record from elsewhere): the loop decides.
        chained: tuple[str, ...] | None = _CHAIN_HEX(xxh3, previous, digests)
        if chained is not None:
            return chained
    links: list[bytes] = []
    for hex_digest in digests:
        # Names are implied by position: the header order is fixed per family and a message
        # index can only shift if the system segment before it changed too.
        previous = xxh3(previous + bytes.fromhex(hex_digest))[:DIGEST_SIZE]
        links.append(previous)
    return _hex_each(links)


_CHAIN_HEX = native_step("chain_hex")
_RECORD_COLUMNS = native_step("record_columns")
_RECORD_COLUMNS_LIKE = native_step("record_columns_like")


def _hex_each(digests: list[bytes]) -> tuple[str, ...]:
    """Return each 16-byte digest as hex (`map` keeps the loop in C)."""
    return _column(digests, bytes.hex)


# Items per C-level `map` in `_column`: ~0.5 ms of work, then the interpreter lock may
# change hands (one `map` over 466,000 segments held it 20-90 ms, the event loop waiting).
COLUMN_CHUNK = 8_192
# Up to this many, a column is one plain `tuple(map(...))` (a tuple of atoms leaves cyclic
# GC at its first collection anyway).
SMALL_COLUMN = 64


def _column(items: Sequence[Any], *steps: Callable[[Any], Any]) -> tuple[Any, ...]:
    """`tuple(map(step, ...items))`, a chunk at a time, out of cyclic GC (atoms only)."""
    if len(items) <= SMALL_COLUMN:  # most requests: the chunking costs more than the map
        small: Iterable[Any] = items
        for step in steps:
            small = map(step, small)
        return tuple(small)
    column: list[Any] = acyclic_list()  # scratch: else young, walked by collections
    for start in range(0, len(items), COLUMN_CHUNK):
        values: Iterable[Any] = items[start : start + COLUMN_CHUNK]
        for step in steps:
            values = map(step, values)
        column += values
    return moved_tuple(column, acyclic=True)  # strings, bytes, ints: no copy, no cycle


def _running_sums(sizes: list[int]) -> tuple[int, ...]:
    """`tuple(accumulate(sizes))`, a chunk at a time (see `_column`)."""
    if len(sizes) <= SMALL_COLUMN:
        return tuple(accumulate(sizes))
    sums: list[int] = acyclic_list()
    total = 0
    for start in range(0, len(sizes), COLUMN_CHUNK):
        running = accumulate(sizes[start : start + COLUMN_CHUNK], initial=total)
        next(running)  # `initial` itself comes first
        sums += running
        total = sums[-1]
    return moved_tuple(sums, acyclic=True)


def _hex_or_empty(digest: bytes) -> str:
    return digest.hex() if digest else ""


def build_record(
    request: RequestSegments,
    rule: CacheRule,
    counter: TokenCounter = estimate_tokens,
    like: tuple[PrefixRecord, int] | None = None,
) -> PrefixRecord:
    """Return the digests, token estimates and breakpoints of one request.

    `like`: an earlier request's record and how many message segments, after the headers,
    this request took from it unchanged (`SegmentReuse.split`): their names and hex
    digests are that record's (an agent step's 1,244 repeated messages: ~0.2 ms).
    """
    segments = request.segments
    head, shared = request.header_count, 0
    if like is not None and _repeats(like[0], segments, head, like[1]):
        shared = like[1]
    if not shared and 0 < len(segments) <= SMALL_COLUMN and counter is estimate_tokens:
        return _small_record(request, rule)
    native = (
        _RECORD_COLUMNS(segments)
        if _RECORD_COLUMNS is not None
        and not shared
        and counter is estimate_tokens
        and len(segments) <= SHARED_CHAIN_MAX  # one call holds the lock: ~0.1 µs a segment
        else None
    )
    if native is None and shared:
        native = _columns_like(segments, like, head, shared, counter)
    if native is not None:  # the maps below in one C pass (~0.2 ms less for 1,245)
        names, digests, canonical, cumulative = native
        return _record(request, rule, names, digests, canonical, cumulative)
    # Columns by itemgetter, in C; not zip(*segments), which makes one tracked iterator per
    # segment (466,000 of them set off full garbage collections of 0.1 s).
    datas = _column(segments, itemgetter(2))
    if counter is estimate_tokens:
        sizes = [(n + 3) >> 2 for n in map(len, datas)]
    else:
        sizes = [counter(data) for data in datas]
    if shared:
        earlier, cut = like[0] if like is not None else None, slice(head, head + shared)
        assert earlier is not None

        def column(taken: tuple[Any, ...], *steps: Callable[[Any], Any]) -> tuple[Any, ...]:
            before = _column(segments[:head], *steps)
            return before + taken[cut] + _column(segments[head + shared :], *steps)

        names = column(earlier.segment_names, itemgetter(0))
        digests = column(earlier.segment_digests, itemgetter(3), bytes.hex)
        canonical = column(earlier.canonical_digests, itemgetter(5), bytes.hex)
    else:
        names = _column(segments, itemgetter(0))
        digests = _column(segments, itemgetter(3), bytes.hex)
        canonical = _column(segments, itemgetter(5), bytes.hex)  # b"" -> "", in C
    return _record(request, rule, names, digests, canonical, _running_sums(sizes))


def _columns_like(
    segments: Sequence[Any],
    like: tuple[PrefixRecord, int] | None,
    head: int,
    shared: int,
    counter: TokenCounter,
) -> tuple[tuple[Any, ...], ...] | None:
    """`build_record`'s columns in one C pass where `shared` message segments after the
    `head` are `like`'s record's (`record_columns_like`: its names and hex digests taken,
    not made again; an agent step's 1,245 segments ~0.25 ms -> ~0.03 ms); None: the maps."""
    columns = _RECORD_COLUMNS_LIKE
    if columns is None or like is None or counter is not estimate_tokens:
        return None
    if len(segments) > SHARED_CHAIN_MAX:  # one call holds the lock
        return None
    earlier = like[0]
    native: tuple[tuple[Any, ...], ...] | None = columns(
        segments,
        earlier.segment_names,
        earlier.segment_digests,
        earlier.canonical_digests,
        head,
        head + shared,
    )
    return native


def _record(
    request: RequestSegments,
    rule: CacheRule,
    names: tuple[str, ...],
    digests: tuple[str, ...],
    canonical: tuple[str, ...],
    cumulative: tuple[int, ...],
) -> PrefixRecord:
    # By position, in `PrefixRecord`'s field order (keywords cost ~0.6 µs more a record).
    return _BUILD(
        request.family,
        request.model,
        names,
        digests,
        canonical,
        cumulative,
        request.stable_count,
        request.header_count,
        written_breakpoints(request, rule),
        _settings(request.segments, request.header_count),
    )


_SETTING = SegmentKind.SETTING


def _settings(segments: Sequence[Any], header_count: int) -> dict[str, str]:
    """The header settings a request renders (not `null`), each a preview of its JSON.

    A loop, not a comprehension: in a small request's record (five headers, none set)
    the comprehension's own frame and the enum member's lookup were ~1 µs of ~5.
    """
    settings: dict[str, str] = {}
    for segment in segments[:header_count]:
        if segment[1] is _SETTING and segment[2] != b"null":
            settings[segment[0]] = segment[2].decode("utf-8", "replace")[:_SETTING_PREVIEW]
    return settings


def _small_record(request: RequestSegments, rule: CacheRule) -> PrefixRecord:
    """`build_record` of a request of few segments (most): its columns in one native pass
    (`record_columns`, ~0.5 µs for six segments), else by one zip (~2 µs)."""
    native = _RECORD_COLUMNS(request.segments) if _RECORD_COLUMNS is not None else None
    if native is not None:
        return _record(request, rule, *native)
    names, _, datas, digests, _, canonical, _ = zip(*request.segments, strict=True)
    return _record(
        request,
        rule,
        names,
        tuple(map(bytes.hex, digests)),
        tuple(map(bytes.hex, canonical)),
        tuple(accumulate([(n + 3) >> 2 for n in map(len, datas)])),
    )


def _repeats(earlier: PrefixRecord, segments: Sequence[Any], head: int, shared: int) -> bool:
    """Whether `earlier` holds, from `head` on, `shared` segments of `segments` (checked at
    both ends of the run: the caller took them from the request `earlier` was built of)."""
    if shared <= 0 or earlier.header_count != head:
        return False
    last = head + shared - 1
    if len(earlier.segment_digests) <= last or len(segments) <= last:
        return False
    return all(
        earlier.segment_digests[i] == segments[i][3].hex()
        and earlier.segment_names[i] == segments[i][0]
        and earlier.canonical_digests[i] == _hex_or_empty(segments[i][5])
        for i in (head, last)
    )


def written_breakpoints(request: RequestSegments, rule: CacheRule) -> tuple[int, ...]:
    """Return the segment indices whose end this request writes to a breakpoint cache."""
    if rule.mode is not CacheMode.BREAKPOINT or not request.segments:
        return ()
    explicit = [
        i for i, s in enumerate(request.segments) if s.breakpoint and s.kind in _BREAKPOINT_KINDS
    ]
    if not request.implicit_breakpoint:
        return tuple(explicit[-rule.max_breakpoints :])
    # The implicit breakpoint closes the newest message that can carry one (not the
    # assistant's), and leaves room for the latest three explicit ones.
    implicit = _implicit_position(request)
    kept = explicit[-(rule.max_breakpoints - 1) :] if rule.max_breakpoints > 1 else []
    return tuple(sorted({*kept, implicit}))


def _implicit_position(request: RequestSegments) -> int:
    last = len(request.segments) - 1
    if request.family != "openai":
        return last
    for index in range(last, request.header_count - 1, -1):
        if request.segments[index].role != "assistant":
            return index
    return last
