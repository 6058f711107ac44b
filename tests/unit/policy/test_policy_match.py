"""Rule matching and step kinds: the first matching rule wins, defaults underneath."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import (
    CONTINUATION,
    TOOL_RESULT,
    UNKNOWN,
    USER_TURN,
    Match,
    RequestFacts,
    infer_step_kind,
    parse_tags,
    rule_matches,
    select_rule,
    validate_policy,
)
from gateway.policy.facts import lowered_headers
from tests.unit.policy.helpers import Planner, tool_body, user_body


def facts(**fields: Any) -> RequestFacts:
    return RequestFacts(**{"alias": "gpt-5", **fields})


def test_first_match_wins_and_defaults_fill_the_rest() -> None:
    policy = validate_policy(
        {
            "defaults": {"effort": "medium", "thinking_budget": 4096},
            "rules": [
                {"name": "tools", "match": {"step": "tool_result"}, "effort": "low"},
                {"match": {"step": "tool_result"}, "effort": "none"},
                {"match": {"team": "ml"}, "thinking_budget": 512},
            ],
        }
    )
    label, actions = select_rule(policy, facts(), TOOL_RESULT)
    assert (label, actions.effort, actions.thinking_budget) == ("tools", "low", 4096)
    label, actions = select_rule(policy, facts(team="ml"), USER_TURN)
    assert (label, actions.effort, actions.thinking_budget) == ("rules[2]", "medium", 512)
    label, actions = select_rule(policy, facts(), USER_TURN)
    assert (label, actions) == ("defaults", policy.defaults)


@pytest.mark.parametrize(
    ("match", "fields", "step", "expected"),
    [
        ({}, {}, USER_TURN, True),
        ({"caller": "key-ab*"}, {"caller": "key-abcd"}, USER_TURN, True),
        ({"caller": "key-ab*"}, {"caller": "key-zz"}, USER_TURN, False),
        ({"caller": "key-ab*"}, {}, USER_TURN, False),
        ({"team": ["ml", "search"]}, {"team": "search"}, USER_TURN, True),
        ({"project": "ci-*"}, {"project": "ci-nightly"}, USER_TURN, True),
        ({"project": "ci-*"}, {"project": "prod"}, USER_TURN, False),
        ({"model": "gpt-*"}, {}, USER_TURN, True),
        ({"model": "claude-*"}, {}, USER_TURN, False),
        ({"step": ["tool_result", "continuation"]}, {}, CONTINUATION, True),
        ({"step": "tool_result"}, {}, USER_TURN, False),
        ({"headers": {"X-Plan": "pro*"}}, {"headers": {"x-plan": "pro-annual"}}, USER_TURN, True),
        ({"headers": {"x-plan": "pro*"}}, {"headers": {"X-PLAN": "free"}}, USER_TURN, False),
        ({"headers": {"x-plan": "pro*"}}, {}, USER_TURN, False),
        ({"tags": ["batch"]}, {"headers": {"X-Farebox-Tags": "Batch, eu"}}, USER_TURN, True),
        ({"tags": ["batch", "us"]}, {"headers": {"X-Farebox-Tags": "batch,eu"}}, USER_TURN, False),
        ({"tags": ["batch"]}, {}, USER_TURN, False),
        ({"team": "ml", "step": "user_turn"}, {"team": "ml"}, TOOL_RESULT, False),
    ],
)
def test_each_matcher(match: dict, fields: dict, step: str, expected: bool) -> None:
    assert rule_matches(Match.model_validate(match), facts(**fields), step) is expected


def test_facts_from_headers() -> None:
    request = RequestFacts.from_headers(
        "m",
        {
            "X-Farebox-Team": "ml",
            "X-Farebox-Project": "p",
            "X-Task-Step-Kind": "Plan",
            "X-Speed-Tier": " Flex ",
            "X-Farebox-Tags": "a, B,,",
        },
        caller="key-1",
        task_effort="low",
    )
    assert (request.team, request.project, request.caller) == ("ml", "p", "key-1")
    assert request.step_kind == "Plan"
    assert request.tier_header == "flex"
    assert request.tags == frozenset({"a", "b"})
    assert request.task_effort == "low"
    assert parse_tags(None) == frozenset()


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "hi"}], USER_TURN),
        ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "r"}], TOOL_RESULT),
        ([{"role": "function", "name": "f", "content": "r"}], TOOL_RESULT),
        ([{"role": "user", "content": [{"type": "tool_result", "content": "r"}]}], TOOL_RESULT),
        ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], USER_TURN),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}],
            CONTINUATION,
        ),
        ([{"role": "system", "content": "be brief"}], UNKNOWN),
        # A mid-conversation system turn after the user's (Claude Code sends one).
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": "env"}], USER_TURN),
        ([], UNKNOWN),
        (["not a message"], UNKNOWN),
    ],
)
def test_step_kind_inferred_from_the_last_message(messages: list, expected: str) -> None:
    assert infer_step_kind({"messages": messages}) == expected


def test_explicit_step_kind_wins() -> None:
    assert infer_step_kind(user_body(), "Summarize ") == "summarize"
    assert infer_step_kind(user_body(), "  ") == USER_TURN
    assert infer_step_kind({}) == UNKNOWN


def test_plan_uses_the_explicit_step_kind_header(make_plan: Planner) -> None:
    policy = {"rules": [{"name": "plan", "match": {"step": "plan"}, "effort": "high"}]}
    decision = make_plan(policy, tool_body(), headers={"X-Task-Step-Kind": "plan"})
    assert (decision.rule, decision.step_kind) == ("plan", "plan")
    assert make_plan(policy, tool_body()).rule == "defaults"


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(alphabet="aAbB-1\u00df\u01c5", max_size=4), st.text(max_size=3), max_size=6
    )
)
def test_header_names_are_lowered_as_a_dict_of_lower_names_would_be(
    headers: dict[str, str],
) -> None:
    expected = {name.lower(): value for name, value in headers.items()}
    lowered = lowered_headers(headers)
    assert lowered == expected and list(lowered) == list(expected)
    assert lowered is not headers  # always a copy: the facts never share the caller's dict
    assert RequestFacts("m", headers=headers).headers == expected
