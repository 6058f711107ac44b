"""Rule matching: the first rule whose conditions all hold wins, over the defaults."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from gateway.policy.facts import RequestFacts
from gateway.policy.schema import Match, Policy, Rule, RuleActions

DEFAULTS_LABEL = "defaults"
"""The rule name reported when no rule matched."""


def _any(value: str | None, patterns: Iterable[str]) -> bool:
    if value is None:
        return False
    for pattern in patterns:
        literal = _LITERAL.get(pattern)
        if literal is None:
            literal = _literal(pattern)
        if value == pattern if literal else fnmatchcase(value, pattern):
            return True
    return False


def _literal(pattern: str) -> bool:
    """Whether `pattern` has no wildcard: `fnmatchcase` then matches only the same string.

    Most rules name a step, model or team outright; `fnmatchcase` hashes the pattern into
    its compiled-pattern cache and runs a regex for each, where `==` gives the same answer.
    """
    literal = not any(char in pattern for char in "*?[")
    if len(_LITERAL) >= MAX_LITERAL:  # patterns come from the config: a reload adds more
        _LITERAL.clear()
    _LITERAL[pattern] = literal
    return literal


_LITERAL: dict[str, bool] = {}
MAX_LITERAL = 4096


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
    if match.tags and not {tag.lower() for tag in match.tags} <= facts.tags:
        return False
    return not match.headers or _headers_match(match, facts)


def select_rule(policy: Policy, facts: RequestFacts, step_kind: str) -> tuple[str, RuleActions]:
    """Return the first matching rule's label and its actions over the defaults."""
    for index, rule in enumerate(policy.rules):
        if rule_matches(rule.match, facts, step_kind):
            return rule.label(index), _over(rule, policy.defaults)
    return DEFAULTS_LABEL, policy.defaults


def _over(rule: Rule, defaults: RuleActions) -> RuleActions:
    """`rule.over(defaults)`, built once per rule and defaults.

    Both are frozen and a reload builds new ones, so the merge never changes; it was a
    pydantic `model_construct` (and a `model_copy` per nested section) on every request.
    Each entry holds its rule and defaults, so no id is reused while it lives.
    """
    key = (id(rule), id(defaults))
    hit = _MERGED.get(key)
    if hit is not None and hit[0] is rule and hit[1] is defaults:
        return hit[2]
    merged = rule.over(defaults)
    if len(_MERGED) >= MAX_MERGED:  # policies replaced by many reloads
        _MERGED.clear()
    _MERGED[key] = (rule, defaults, merged)
    return merged


_MERGED: dict[tuple[int, int], tuple[Rule, RuleActions, RuleActions]] = {}
MAX_MERGED = 1024
