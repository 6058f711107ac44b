"""Lint recorded requests for prompt-cache breakers: one request, or a conversation of them.

Single-request detectors run on each request's cacheable part; cross-request detectors run
on each consecutive pair. A span both flag is reported once, as confirmed (`error`), and a
segment the previous request already held byte for byte is not reported again (it was
reported then, or it is history replayed verbatim, which breaks nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from gateway.prefix.advice import suggest
from gateway.prefix.cache_rules import family_for_model, rule_for
from gateway.prefix.cacheability import Uncacheable, uncacheable
from gateway.prefix.crossdiff import diff_requests
from gateway.prefix.detectors import Finding, ScanCache, scan_request
from gateway.prefix.segments import RequestSegments, split_request

_CONTEXT = 40


@dataclass(frozen=True, slots=True)
class LintFinding:
    """One volatile span in one recorded request, with the fix to suggest."""

    request: int
    segment: str
    offset: int
    length: int
    kind: str
    severity: str
    text: str
    suggestion: str
    before: str = ""
    after: str = ""


@dataclass(frozen=True, slots=True)
class LintReport:
    """The findings of a lint run, one per volatile span."""

    requests: int
    findings: tuple[LintFinding, ...]
    uncacheable: Uncacheable | None = None  # the newest request caches nothing as sent

    @property
    def clean(self) -> bool:
        """Return whether nothing was found and the prompt can be cached at all."""
        return not self.findings and self.uncacheable is None

    def to_json(self) -> str:
        """Return the report as JSON (for `farebox lint --json`)."""
        payload = {
            "requests": self.requests,
            "findings": [asdict(f) for f in self.findings],
            "cache": "uncacheable" if self.uncacheable else "cacheable",
            "uncacheable": asdict(self.uncacheable) if self.uncacheable else None,
        }
        return orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode()


def _family(body: Mapping[str, Any], family: str | None) -> str:
    model = body.get("model")
    return family or family_for_model(model if isinstance(model, str) else "")


def _lint_finding(request: int, segments: RequestSegments, finding: Finding) -> LintFinding:
    text = next(s for s in segments.segments if s.name == finding.segment).text
    end = finding.offset + finding.length
    return LintFinding(
        request=request,
        segment=finding.segment,
        offset=finding.offset,
        length=finding.length,
        kind=finding.kind,
        severity=str(finding.severity),
        text=finding.text,
        suggestion=suggest(finding.kind, finding.segment),
        before=text[max(finding.offset - _CONTEXT, 0) : finding.offset],
        after=text[end : end + _CONTEXT],
    )


def lint_request(body: Mapping[str, Any], *, family: str | None = None) -> LintReport:
    """Lint one request body."""
    return lint_conversation([body], family=family)


def lint_conversation(
    bodies: Iterable[Mapping[str, Any]], *, family: str | None = None
) -> LintReport:
    """Lint consecutive requests of one caller, oldest first."""
    cache = ScanCache()
    previous: RequestSegments | None = None
    out: list[LintFinding] = []
    count = 0
    blocked: Uncacheable | None = None
    for index, body in enumerate(bodies):
        count += 1
        rule = rule_for(_family(body, family))
        current = split_request(body, rule)
        single, _ = scan_request(current, cache)
        merged = _merge(previous, current, single)
        out.extend(_lint_finding(index, current, f) for f in merged)
        blocked = uncacheable(current, rule)
        previous = current
    return LintReport(count, tuple(out), blocked)


def _merge(
    previous: RequestSegments | None, current: RequestSegments, single: Sequence[Finding]
) -> list[Finding]:
    """Return single-request and cross-request findings, one per span."""
    if previous is None:
        return list(single)
    by_segment: dict[str, list[Finding]] = {}
    for finding in single:
        by_segment.setdefault(finding.segment, []).append(finding)
    cross = _unique(diff_requests(previous, current, by_segment))
    # A segment the previous request already held byte for byte was either reported then
    # or replayed verbatim (history), so it breaks nothing now.
    seen = {s.name: s.digest for s in previous.segments}
    fresh = [
        f
        for f in single
        if seen.get(f.segment) != _digest_of(current, f.segment)
        and not any(_overlaps(f, c) for c in cross)
    ]
    return sorted([*cross, *fresh], key=lambda f: (_position(current, f.segment), f.offset))


def _unique(findings: Sequence[Finding]) -> list[Finding]:
    seen: set[tuple[str, int, int, str]] = set()
    unique = []
    for finding in findings:
        key = (finding.segment, finding.offset, finding.length, finding.kind)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique


def _overlaps(a: Finding, b: Finding) -> bool:
    if a.segment != b.segment:
        return False
    return a.offset < b.offset + max(b.length, 1) and b.offset < a.offset + max(a.length, 1)


def _digest_of(request: RequestSegments, name: str) -> bytes:
    return next(s.digest for s in request.segments if s.name == name)


def _position(request: RequestSegments, name: str) -> int:
    return next(i for i, s in enumerate(request.segments) if s.name == name)
