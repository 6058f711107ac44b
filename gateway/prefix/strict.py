"""Strict mode: refuse a request whose cacheable prefix holds volatile content (HTTP 400)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.prefix.advice import describe, suggest
from gateway.prefix.compare import Divergence, Reason
from gateway.prefix.detectors import Finding, Severity


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason to refuse the request, with a message that says what and where."""

    segment: str
    offset: int
    kind: str
    text: str
    message: str


def strict_violations(
    findings: Sequence[Finding], divergence: Divergence | None = None
) -> list[Violation]:
    """Return what makes the request fail strict mode (empty when it passes).

    Volatile values found in the cacheable part fail it, and so does a prefix that diverged
    only because JSON was re-serialised in another order, which is never intended.
    """
    violations = [
        Violation(
            f.segment,
            f.offset,
            f.kind,
            f.text,
            f"{describe(f.segment, f.offset, f.kind, f.text)}; {suggest(f.kind, f.segment)}",
        )
        for f in findings
        if f.severity is not Severity.INFO
    ]
    if divergence is not None and divergence.reason is Reason.REORDERED_JSON:
        violations.append(
            Violation(
                divergence.segment,
                0,
                "reordered_json",
                "",
                f"{divergence.detail}; {suggest('reordered_json')}",
            )
        )
    return violations


def strict_error_message(violations: Sequence[Violation]) -> str:
    """Return the 400 error message for a request that failed strict mode."""
    lines = "; ".join(v.message for v in violations[:5])
    more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
    return (
        "Farebox strict prefix mode refused this request: the cacheable part of the prompt "
        f"holds content that changes between requests, so every call pays full price. {lines}"
        f"{more}. Fix the prompt, or turn strict prefix mode off for this key."
    )
