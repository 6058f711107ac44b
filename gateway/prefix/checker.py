"""The per-request entry point: fingerprint, scan, compare, in one call.

The pipeline builds one `PrefixChecker` in the lifespan (it owns the scan cache, which is
what makes steady state cheap) and calls `check` for each request with the caller's recent
records. It stores `PrefixCheck.record` in the history afterwards and, once the response is
in, calls `verdict(...)` with `expected_cached_for(prompt_tokens)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.prefix.cache_rules import CacheExpectation, CacheRule
from gateway.prefix.compare import Divergence, compare, explain
from gateway.prefix.detectors import (
    HOT_PATH_SCAN_BUDGET,
    Finding,
    ScanBudget,
    ScanCache,
    scan_request,
)
from gateway.prefix.record import PrefixRecord, TokenCounter, build_record, estimate_tokens
from gateway.prefix.segments import RequestSegments, split_request


@dataclass(frozen=True, slots=True)
class PrefixCheck:
    """Everything the pipeline needs from one request's prefix check."""

    request: RequestSegments
    record: PrefixRecord
    findings: tuple[Finding, ...]
    unscanned: tuple[str, ...]
    expectation: CacheExpectation
    divergence: Divergence | None

    def expected_cached_for(self, prompt_tokens: int) -> int:
        """Return the expected cached tokens rescaled to the prompt size the provider reported."""
        return self.expectation.scaled(prompt_tokens)


class PrefixChecker:
    """Checks requests against their history; one per process, shared by all requests."""

    def __init__(
        self,
        *,
        cache: ScanCache | None = None,
        scan_budget: int | None = HOT_PATH_SCAN_BUDGET,
        counter: TokenCounter = estimate_tokens,
    ) -> None:
        self.cache = cache or ScanCache()
        self.scan_budget = scan_budget
        self.counter = counter

    def fingerprint(self, body: Mapping[str, Any], rule: CacheRule) -> PrefixRecord:
        """Return only the fingerprint chain of `body` (no scan, no comparison)."""
        return build_record(split_request(body, rule), rule, self.counter)

    def check(
        self, body: Mapping[str, Any], rule: CacheRule, history: Sequence[PrefixRecord] = ()
    ) -> PrefixCheck:
        """Fingerprint `body`, compare it with `history`, and scan what is new in it.

        Segments that repeat the closest earlier request byte for byte are not scanned and
        not reported: they demonstrably did not change, whatever they look like (a tool
        output full of timestamps, replayed as history, breaks nothing).
        """
        request = split_request(body, rule)
        record = build_record(request, rule, self.counter)
        comparison = compare(record, history, rule, explain_divergence=False)
        budget = ScanBudget(self.scan_budget)
        findings, unscanned = scan_request(request, self.cache, budget, comparison.matched)
        divergence = None
        if comparison.closest is not None:
            divergence = explain(record, comparison.closest, comparison.matched, rule, findings)
        return PrefixCheck(
            request=request,
            record=record,
            findings=tuple(findings),
            unscanned=tuple(unscanned),
            expectation=comparison.expectation,
            divergence=divergence,
        )
