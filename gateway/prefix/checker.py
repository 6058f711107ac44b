"""The per-request entry point: fingerprint, scan, compare, in one call.

The pipeline builds one `PrefixChecker` in the lifespan (it owns the scan cache, which is
what makes steady state cheap) and calls `check` for each request with the caller's recent
records. It stores `PrefixCheck.record` in the history afterwards and, once the response is
in, calls `verdict(...)` with `expected_cached_for(prompt_tokens)`.

Two expectations come out of a check. `expectation` is what the provider will read of this
prompt as sent (the `X-Farebox-Expected-Cached-Tokens` header, before the call). When the
prefix broke for a reason the client could have avoided, `forecast` is what it would have
read had the broken segment been kept: the verdict measures the loss against that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.frozen import mutable_twin
from gateway.prefix.cache_rules import CacheExpectation, CacheRule, expect
from gateway.prefix.clean_runs import MIN_RUN as CLEAN_RUN
from gateway.prefix.clean_runs import CleanRuns
from gateway.prefix.compare import Comparison, Divergence, compare, explain
from gateway.prefix.detectors import (
    HOT_PATH_SCAN_BUDGET,
    Finding,
    ScanBudget,
    ScanCache,
    scan_request,
)
from gateway.prefix.locate import moved_tuple
from gateway.prefix.rawcut import MIN_BYTES as RAW_MIN_BYTES
from gateway.prefix.rawcut import raw_messages
from gateway.prefix.record import PrefixRecord, TokenCounter, build_record, estimate_tokens
from gateway.prefix.reuse import SegmentReuse
from gateway.prefix.segments import FEW_MESSAGES, RequestSegments, split_request


@dataclass(frozen=True, slots=True)
class PrefixCheck:
    """Everything the pipeline needs from one request's prefix check."""

    request: RequestSegments
    record: PrefixRecord
    findings: tuple[Finding, ...]
    unscanned: tuple[str, ...]
    expectation: CacheExpectation
    divergence: Divergence | None
    forecast: CacheExpectation | None = None
    predicted_prompt_tokens: int = 0  # the prompt's size in the provider's tokens, foreseen

    @property
    def expected_cached_now(self) -> int:
        """Return the cached tokens to announce before the call, never above the prompt."""
        return self.expectation.scaled(self.predicted_prompt_tokens)

    def expected_cached_for(self, prompt_tokens: int) -> int:
        """Return the expected cached tokens rescaled to the prompt size the provider reported.

        After an avoidable break this is the forecast: what the cache would have given.
        """
        return (self.forecast or self.expectation).scaled(prompt_tokens)


_PREFIX_CHECK = mutable_twin(PrefixCheck)  # a store per field (`gateway.frozen`)
_NOTHING_CLEAN = range(0)  # a small request's: no run of the closest's to skip


class PrefixChecker:
    """Checks requests against their history; one per process, shared by all requests."""

    def __init__(
        self,
        *,
        cache: ScanCache | None = None,
        scan_budget: int | None = HOT_PATH_SCAN_BUDGET,
        counter: TokenCounter = estimate_tokens,
    ) -> None:
        self.cache = cache if cache is not None else ScanCache()  # an empty one is falsy
        self.clean_runs = CleanRuns()
        self.reuse = SegmentReuse()
        self.scan_budget = scan_budget
        self.counter = counter

    def fingerprint(self, body: Mapping[str, Any], rule: CacheRule) -> PrefixRecord:
        """Return only the fingerprint chain of `body` (no scan, no comparison)."""
        return build_record(split_request(body, rule), rule, self.counter)

    def check(
        self,
        body: Mapping[str, Any],
        rule: CacheRule,
        history: Sequence[PrefixRecord] = (),
        *,
        raw: bytes | None = None,
        reuse_key: str | None = None,
        validated: Sequence[Any] | None = None,
        keep_parsed: bool = False,
    ) -> PrefixCheck:
        """Fingerprint `body`, compare it with `history`, and scan what is new in it.

        Segments that repeat the closest earlier request byte for byte are not scanned and
        not reported: they demonstrably did not change, whatever they look like (a tool
        output full of timestamps, replayed as history, breaks nothing). With `raw` (the
        bytes `body` was parsed from, its messages unedited) the messages' bytes are taken
        from it where they are canonical (`rawcut`), not dumped again; with a `reuse_key`
        too (a task), the messages that repeat that key's previous request are not cut
        again; and
        `validated` (what the parse made of each message) is kept for the next one's, with
        the parsed messages themselves when `keep_parsed` (nothing will change them).
        """
        like: list[tuple[PrefixRecord, int]] = []
        if raw is not None and reuse_key is not None:
            request = self.reuse.split(reuse_key, raw, body, rule, validated, keep_parsed, like)
        else:
            pieces = known = None
            messages = body.get("messages")
            large = raw is not None and len(raw) >= RAW_MIN_BYTES  # a small body: dumped
            if raw is not None and large and isinstance(messages, list):
                # a run its parse took from the caller's previous body: that body's segments
                known = self.reuse.messages.known(raw, messages)
                if known is None or len(messages) - known.upto > FEW_MESSAGES:
                    pieces = raw_messages(raw, messages)
            request = split_request(body, rule, known, pieces)
            if raw is not None and large:
                self.reuse.messages.checked(raw, request)  # for its `keep`: the next `known`
        record = build_record(request, rule, self.counter, like[0] if like else None)
        if raw is not None and reuse_key is not None:
            self.reuse.keep_record(reuse_key, raw, record)
        comparison = compare(record, history, rule, explain_divergence=False)
        if comparison.closest is not None:  # the shared part of the chain is not hashed again
            record.share_chain(comparison.closest, comparison.matched)
        budget = ScanBudget(self.scan_budget)
        clean, repaired = _NOTHING_CLEAN, None
        long_run = request.stable_count - comparison.matched >= CLEAN_RUN  # not a small request
        if long_run:
            clean, repaired = self._repeated_clean(record, comparison)
        findings, unscanned = scan_request(request, self.cache, budget, comparison.matched, clean)
        if long_run and not findings and not unscanned:
            self.clean_runs.keep(record, comparison.matched, request.stable_count)
        divergence = None
        if comparison.closest is not None:
            divergence = explain(record, comparison.closest, comparison.matched, rule, findings)
        # By position, in `PrefixCheck`'s field order (keywords cost ~0.5 µs more).
        return _PREFIX_CHECK(
            request,
            record,
            tuple(findings),
            moved_tuple(unscanned, acyclic=True),  # names: no copy, no cycle
            comparison.expectation,
            divergence,
            forecast(record, comparison, divergence, rule, repaired),
            predicted_prompt_tokens(record, comparison.closest),
        )

    def _repeated_clean(
        self, record: PrefixRecord, comparison: Comparison
    ) -> tuple[range, int | None]:
        """The positions of `record`'s segments that repeat, after the break, the closest
        request's clean run (`CleanRuns`: not looked up), and where that repeat ends
        (`repaired_match`, for the forecast too; None where not needed)."""
        closest, matched = comparison.closest, comparison.matched
        run = self.clean_runs.run_of(closest) if closest is not None else range(0)
        if closest is None or not run:
            return range(0), None
        repaired = repaired_match(record, closest, matched)
        return range(max(matched + 1, run.start), min(run.stop, repaired)), repaired


def forecast(
    record: PrefixRecord,
    comparison: Comparison,
    divergence: Divergence | None,
    rule: CacheRule,
    repaired: int | None = None,
) -> CacheExpectation | None:
    """Return the cache read had the broken segment been kept, after an avoidable break.

    `repaired`: `repaired_match(record, comparison.closest, comparison.matched)`, if known.
    """
    closest = comparison.closest
    if closest is None or divergence is None or not divergence.avoidable:
        return None
    if repaired is None:
        repaired = repaired_match(record, closest, comparison.matched)
    written = [p for p in closest.breakpoints if p < repaired]
    return expect(rule, record.cumulative_tokens, repaired, record.breakpoints, written)


def repaired_match(current: PrefixRecord, earlier: PrefixRecord, matched: int) -> int:
    """Return how many leading segments would match if segment `matched` had not changed."""
    a, b = current.segment_digests, earlier.segment_digests
    end = min(len(a), len(b))
    index = min(matched + 1, end)
    # The first difference from `index` on, by binary search on the equality of slices
    # (monotone; compared in C, as `compare.common_prefix`): a step a position took ~0.1 ms
    # over a 1 MB prompt's 1,245 segments after its system prompt changed.
    high = end
    while index < high:
        middle = (index + high + 1) // 2
        if a[index:middle] == b[index:middle]:
            index = middle
        else:
            high = middle - 1
    return index


def predicted_prompt_tokens(record: PrefixRecord, closest: PrefixRecord | None) -> int:
    """Return this prompt's size in provider tokens, calibrated on the closest request.

    Bytes / 4 overestimates English prose by a quarter; the closest earlier request's
    reported size gives the ratio, so an announced cache read fits inside the prompt.
    """
    estimate = record.total_tokens
    if closest is None or closest.reported_prompt_tokens <= 0 or closest.total_tokens <= 0:
        return estimate
    return estimate * closest.reported_prompt_tokens // closest.total_tokens
