"""Rule patterns without a wildcard are compared as strings: the same answers as fnmatch.

`_any` compares a literal pattern with `==` and hands any other to `fnmatchcase`; for any
value and patterns (wildcards, character classes, literal ones, case differences) it
answers as `any(fnmatchcase(value, pattern) ...)` does, and a rule naming a step outright
still matches only that step.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from hypothesis import given
from hypothesis import strategies as st

from gateway.policy import match
from gateway.policy.facts import RequestFacts
from gateway.policy.schema import Policy

_CHARS = st.sampled_from(list("ab_A*?[]!-.\\x"))
_TEXT = st.text(_CHARS, max_size=6)


@given(value=st.none() | _TEXT, patterns=st.lists(_TEXT, max_size=4))
def test_the_same_answer_as_fnmatchcase(value: str | None, patterns: list[str]) -> None:
    expected = value is not None and any(fnmatchcase(value, pattern) for pattern in patterns)
    assert match._any(value, patterns) is expected
    assert match._any(value, tuple(patterns)) is expected  # again, from the kept answers


def test_a_literal_step_matches_that_step_alone() -> None:
    policy = Policy.model_validate(
        {
            "rules": [
                {"name": "tools", "match": {"step": ["tool_result"]}, "max_tokens": {"default": 1}},
                {"name": "users", "match": {"step": ["user_*"]}, "max_tokens": {"default": 2}},
            ]
        }
    )
    facts = RequestFacts.from_headers("m", {})
    assert match.select_rule(policy, facts, "tool_result")[0] == "tools"
    assert match.select_rule(policy, facts, "TOOL_RESULT")[0] == "defaults"  # case counts
    assert match.select_rule(policy, facts, "tool_result2")[0] == "defaults"
    assert match.select_rule(policy, facts, "user_turn")[0] == "users"


def test_the_kept_answers_are_bounded() -> None:
    for number in range(match.MAX_LITERAL + 10):
        match._any("x", (f"p{number}",))
    assert len(match._LITERAL) <= match.MAX_LITERAL
