"""Compare a request's fingerprint chain with recent ones: expected cache, and why it diverged.

The history is the caller's recent records, oldest first (the store decides whose and how
many). The closest record is the one sharing the longest prefix, the newest on a tie; where
the current request leaves it, we name the segment and the reason, following the family's
render order (for Anthropic a changed tool list invalidates everything, a changed speed
the system prompt and messages, a changed effort or thinking setting only the messages).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import compress, count, islice
from operator import ne

from gateway.frozen import mutable_twin
from gateway.prefix.cache_rules import CacheExpectation, CacheRule, expect, invalidated_by
from gateway.prefix.detectors import Finding
from gateway.prefix.locate import native_step
from gateway.prefix.record import PrefixRecord

_SHIFT_LOOKAHEAD = 8
# Up to this many segments a common prefix is found by one pass (`common_prefix`): the
# binary search's slices cost more than the compares they save.
_LINEAR_UP_TO = 64
_COMMON_LENGTH = native_step("common_length")


class Reason(StrEnum):
    """Why a prompt stopped matching the closest earlier request."""

    VOLATILE_VALUE = "volatile_value"
    REORDERED_JSON = "reordered_json"
    TOOLS_CHANGED = "tools_changed"
    EFFORT_CHANGED = "effort_changed"
    SPEED_CHANGED = "speed_changed"
    TOOL_CHOICE_CHANGED = "tool_choice_changed"
    RESPONSE_FORMAT_CHANGED = "response_format_changed"
    SYSTEM_CHANGED = "system_changed"
    REQUEST_SPECIFIC_PREFIX = "request_specific_prefix"
    EDITED_HISTORY = "edited_history"
    BRANCHED = "branched"
    MODEL_CHANGED = "model_changed"


_SETTING_REASONS = {
    "effort": Reason.EFFORT_CHANGED,
    "speed": Reason.SPEED_CHANGED,
    "tool_choice": Reason.TOOL_CHOICE_CHANGED,
}
# Reasons that cost money the client could have kept; BRANCHED is a normal new turn.
AVOIDABLE = frozenset(set(Reason) - {Reason.BRANCHED, Reason.MODEL_CHANGED})


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where and why the prompt left the closest earlier request."""

    index: int
    segment: str
    reason: Reason
    detail: str
    invalidated_tokens: int
    invalidates: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def avoidable(self) -> bool:
        """Return whether the client could have kept this prefix cached."""
        return self.reason in AVOIDABLE


@dataclass(frozen=True, slots=True)
class Comparison:
    """The outcome of comparing one request with the history."""

    expectation: CacheExpectation
    closest: PrefixRecord | None
    matched: int
    divergence: Divergence | None


# `Comparison(...)` and `Divergence(...)` a store per field (`gateway.frozen`): one each per
# request, ~2 µs apiece through the frozen `__init__` on the slow box.
_COMPARISON = mutable_twin(Comparison)
_DIVERGENCE = mutable_twin(Divergence)


def common_prefix(current: PrefixRecord, earlier: PrefixRecord) -> int:
    """Return how many leading segments two records share (0 across models or families)."""
    if current.model != earlier.model or current.family != earlier.family:
        return 0
    a, b = current.segment_digests, earlier.segment_digests
    low, high = 0, min(len(a), len(b))
    if high <= _LINEAR_UP_TO:  # a small request: the first unequal pair, found in C
        return next(compress(count(), map(ne, a, b)), high)
    # A prompt that leaves the other early (a fresh system prompt) is found in the first
    # pairs: the slices of the search below copy about all of both (~25 µs a record for a
    # 1 MB prompt's 1,245 digests, four records a request).
    early = next(compress(count(), islice(map(ne, a, b), _LINEAR_UP_TO)), None)
    if early is not None:
        return early
    if _COMMON_LENGTH is not None and type(a) is tuple and type(b) is tuple:
        # One C pass, a pointer compare per repeated digest (an agent step's are its
        # previous record's objects): ~25 µs -> ~3 µs a record of 1,245 digests.
        found: int | None = _COMMON_LENGTH(a, b)
        if found is not None:
            return found
    low = _LINEAR_UP_TO
    # Binary search on prefix equality (monotone): tuple slices compare in C, ~20x faster
    # than a Python loop over a few hundred digests, and a request compares with several.
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def longest_seen(fingerprints: Sequence[str], seen: Callable[[str], bool]) -> int:
    """Return how many leading fingerprints a fingerprint-set store has seen (O(log n) asks).

    For stores that keep a set of every fingerprint written recently instead of records.
    """
    low, high = 0, len(fingerprints)
    while low < high:
        middle = (low + high + 1) // 2
        if seen(fingerprints[middle - 1]):
            low = middle
        else:
            high = middle - 1
    return low


def compare(
    current: PrefixRecord,
    history: Sequence[PrefixRecord],
    rule: CacheRule,
    findings: Sequence[Finding] = (),
    *,
    explain_divergence: bool = True,
) -> Comparison:
    """Return the expected cache read for `current` and where it left the closest record."""
    closest, matched = None, 0
    written: list[int] = []
    for record in history:
        shared = common_prefix(current, record)
        if closest is None or shared >= matched:
            closest, matched = record, shared
        # A boundary an earlier request wrote is readable when all of it is repeated.
        if record.breakpoints:
            written.extend(p for p in record.breakpoints if p < shared)
    expectation = expect(rule, current.cumulative_tokens, matched, current.breakpoints, written)
    divergence = None
    if closest is not None and explain_divergence:
        divergence = explain(current, closest, matched, rule, findings)
    return _COMPARISON(expectation, closest, matched, divergence)


def explain(
    current: PrefixRecord,
    earlier: PrefixRecord,
    matched: int,
    rule: CacheRule,
    findings: Sequence[Finding] = (),
) -> Divergence | None:
    """Return why `current` stops matching `earlier` after `matched` segments, if it does."""
    if matched >= len(earlier.segment_digests) or matched >= len(current.segment_digests):
        return None  # one prompt extends the other: nothing was lost
    name = current.segment_names[matched]
    before = current.cumulative_tokens[matched - 1] if matched else 0
    lost = current.total_tokens - before
    part = name if not name.startswith("messages[") else "messages"
    reason, detail = _reason(current, earlier, matched, findings)
    hits: tuple[Finding, ...] = ()
    if reason is Reason.VOLATILE_VALUE:  # else none are kept: not gathered (a frame less)
        hits = tuple(f for f in findings if f.segment == name)
    invalidates = invalidated_by(rule, part)
    return _DIVERGENCE(matched, name, reason, detail, lost, invalidates, hits)


def _reason(
    current: PrefixRecord, earlier: PrefixRecord, k: int, findings: Sequence[Finding]
) -> tuple[Reason, str]:
    name = current.segment_names[k]
    if current.model != earlier.model or current.family != earlier.family:
        return Reason.MODEL_CHANGED, f"model {earlier.model!r} -> {current.model!r}"
    if earlier.segment_names[k] != name:
        return Reason.EDITED_HISTORY, f"{earlier.segment_names[k]} became {name}"
    canonical = current.canonical_digests[k]
    if canonical and canonical == earlier.canonical_digests[k]:
        return Reason.REORDERED_JSON, f"{name}: same content, different key or tool order"
    volatile = [f for f in findings if f.segment == name] if findings else findings
    if volatile:
        shown = ", ".join(f"{f.kind} {f.text!r}" for f in volatile[:3])
        return Reason.VOLATILE_VALUE, f"{name} holds volatile values: {shown}"
    if name in _SETTING_REASONS:
        old, new = earlier.settings.get(name, "null"), current.settings.get(name, "null")
        return _SETTING_REASONS[name], f"{name} {old} -> {new}"
    if name == "tools":
        return Reason.TOOLS_CHANGED, "tool definitions changed"
    if name == "response_format":
        return Reason.RESPONSE_FORMAT_CHANGED, "response_format changed"
    if name == "system":
        if _later_shared(current, earlier, k):
            detail = "system prompt differs but the messages after it match"
            return Reason.REQUEST_SPECIFIC_PREFIX, detail
        return Reason.SYSTEM_CHANGED, "system prompt changed"
    return _message_reason(current, earlier, k)


def _message_reason(current: PrefixRecord, earlier: PrefixRecord, k: int) -> tuple[Reason, str]:
    name = current.segment_names[k]
    shift = _shift(current.segment_digests, earlier.segment_digests, k)
    if shift > 0:
        return Reason.EDITED_HISTORY, f"{shift} message(s) removed before {name}"
    if shift < 0:
        return Reason.EDITED_HISTORY, f"{-shift} message(s) inserted at {name}"
    if k >= earlier.stable_count:
        return Reason.BRANCHED, f"a different newest turn from {name} on"
    return Reason.EDITED_HISTORY, f"{name} was edited after it was sent"


def _shift(current: Sequence[str], earlier: Sequence[str], k: int) -> int:
    """Return +n when n earlier segments were dropped at k, -n when n were inserted, else 0."""
    in_earlier, in_current = len(earlier), len(current)
    # Past both ends nothing is compared: the newest message of a small request (k last)
    # looks at no n at all.
    for n in range(1, min(_SHIFT_LOOKAHEAD, max(in_earlier, in_current) - k - 1) + 1):
        if k + n < in_earlier and current[k] == earlier[k + n]:
            return n
        if k + n < in_current and current[k + n] == earlier[k]:
            return -n
    return 0


def _later_shared(current: PrefixRecord, earlier: PrefixRecord, k: int) -> bool:
    """Return whether some later cacheable segment is identical in both requests."""
    end = min(current.stable_count, earlier.stable_count, len(earlier.segment_digests))
    return any(
        current.segment_digests[i] == earlier.segment_digests[i]
        and current.segment_names[i].startswith("messages[")
        for i in range(k + 1, end)
    )
