"""Rule matching: the first rule whose conditions all hold wins, over the defaults."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from gateway.policy.facts import RequestFacts
from gateway.policy.schema import Match, Policy, RuleActions

DEFAULTS_LABEL = "defaults"
"""The rule name reported when no rule matched."""


def _any(value: str | None, patterns: Iterable[str]) -> bool:
    return value is not None and any(fnmatchcase(value, pattern) for pattern in patterns)


def _headers_match(match: Match, facts: RequestFacts) -> bool:
    return all(
        _any(facts.headers.get(name.lower()), patterns) for name, patterns in match.headers.items()
    )


def rule_matches(match: Match, facts: RequestFacts, step_kind: str) -> bool:
    """Whether every condition of `match` holds for this request."""
    checks = (
        (match.caller, facts.caller),
        (match.team, facts.team),
        (match.project, facts.project),
        (match.model, facts.alias),
        (match.step, step_kind),
    )
    for patterns, value in checks:
        if patterns is not None and not _any(value, patterns):
            return False
    if not {tag.lower() for tag in match.tags} <= facts.tags:
        return False
    return _headers_match(match, facts)


def select_rule(policy: Policy, facts: RequestFacts, step_kind: str) -> tuple[str, RuleActions]:
    """Return the first matching rule's label and its actions over the defaults."""
    for index, rule in enumerate(policy.rules):
        if rule_matches(rule.match, facts, step_kind):
            return rule.label(index), rule.over(policy.defaults)
    return DEFAULTS_LABEL, policy.defaults
