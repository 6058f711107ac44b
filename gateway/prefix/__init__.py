"""Prompt-cache checks: is this request's prefix cacheable, and if not, why not?

Pure logic, no I/O and no awaits. The modules, in the order a request meets them:

    cache_rules  one table of provider rules: render order, minimums, granularity
    segments     cut a body into rendered segments with canonical bytes and digests
    record       the fingerprint chain (`PrefixRecord`) the history store keeps
    detectors    volatile values in the cacheable part, cached per segment digest
    compare      expected cached tokens and where/why the prefix diverged
    checker      `PrefixChecker.check`: all of the above in one call
    verdict      after the response: hit, miss, money lost
    actions      normalize, sticky prompt_cache_key
    breakpoints  Anthropic cache_control placement
    strict       findings that make a 400 in strict mode
    crossdiff    what changed between two requests (lint)
    lint, render, lint_cli   `farebox lint`
"""

from __future__ import annotations

from gateway.prefix.actions import canonical_schema, normalize, sticky_cache_key
from gateway.prefix.breakpoints import anthropic_cache_breakpoints, apply_breakpoints
from gateway.prefix.cache_rules import (
    CacheExpectation,
    CacheMode,
    CacheRule,
    Family,
    family_for_model,
    family_of,
    rule_for,
    rule_from_model_info,
)
from gateway.prefix.checker import PrefixCheck, PrefixChecker
from gateway.prefix.compare import (
    Comparison,
    Divergence,
    Reason,
    compare,
    explain,
    longest_seen,
)
from gateway.prefix.crossdiff import diff_requests
from gateway.prefix.detectors import HOT_PATH_SCAN_BUDGET, Finding, ScanCache, Severity
from gateway.prefix.lint import LintFinding, LintReport, lint_conversation, lint_request
from gateway.prefix.record import PrefixRecord, build_record, estimate_tokens
from gateway.prefix.segments import RequestSegments, Segment, SegmentKind, split_request
from gateway.prefix.strict import Violation, strict_error_message, strict_violations
from gateway.prefix.verdict import CacheStatus, Verdict, verdict

__all__ = [
    "HOT_PATH_SCAN_BUDGET",
    "CacheExpectation",
    "CacheMode",
    "CacheRule",
    "CacheStatus",
    "Comparison",
    "Divergence",
    "Family",
    "Finding",
    "LintFinding",
    "LintReport",
    "PrefixCheck",
    "PrefixChecker",
    "PrefixRecord",
    "Reason",
    "RequestSegments",
    "ScanCache",
    "Segment",
    "SegmentKind",
    "Severity",
    "Verdict",
    "Violation",
    "anthropic_cache_breakpoints",
    "apply_breakpoints",
    "build_record",
    "canonical_schema",
    "compare",
    "diff_requests",
    "estimate_tokens",
    "explain",
    "family_for_model",
    "family_of",
    "lint_conversation",
    "lint_request",
    "longest_seen",
    "normalize",
    "rule_for",
    "rule_from_model_info",
    "split_request",
    "sticky_cache_key",
    "strict_error_message",
    "strict_violations",
    "verdict",
]
