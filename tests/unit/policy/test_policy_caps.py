"""Output caps: default, clamp and strict rejection, in each backend's field."""

from __future__ import annotations

import pytest

from gateway.policy import Clamp, output_field
from gateway.policy.decision import Draft
from tests.unit.policy.helpers import GPT5, SONNET_45, Planner, user_body

CAPS = {"defaults": {"max_tokens": {"default": 500, "ceiling": 2000}}}


@pytest.mark.parametrize(
    ("family", "caps", "body", "field"),
    [
        ("openai", {}, {}, "max_tokens"),
        ("openai", GPT5, {}, "max_completion_tokens"),
        ("openai", {}, {"max_completion_tokens": 5}, "max_completion_tokens"),
        ("vllm", {}, {}, "max_tokens"),
        ("vllm", {}, {"max_completion_tokens": 5}, "max_completion_tokens"),
        ("sglang", {}, {"max_tokens": 5}, "max_tokens"),
        ("anthropic", {}, {"max_completion_tokens": 5}, "max_tokens"),
        ("other", {}, {}, "max_tokens"),
    ],
)
def test_output_field(family: str, caps: dict, body: dict, field: str) -> None:
    assert output_field(family, body, bool(caps.get("supports_reasoning"))) == field  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("family", "caps", "field"),
    [
        ("openai", {}, "max_tokens"),
        ("openai", GPT5, "max_completion_tokens"),
        ("vllm", {}, "max_tokens"),
        ("sglang", {}, "max_tokens"),
        ("anthropic", {}, "max_tokens"),
    ],
)
def test_default_set_when_client_sent_none(
    make_plan: Planner, family: str, caps: dict, field: str
) -> None:
    decision = make_plan(CAPS, user_body(), family, caps)
    assert decision.set_fields[field] == 500
    assert decision.max_output_tokens == 500
    assert decision.clamps == ()


def test_ceiling_alone_is_the_default(make_plan: Planner) -> None:
    decision = make_plan({"defaults": {"max_tokens": {"ceiling": 900}}}, user_body())
    assert decision.set_fields == {"max_tokens": 900}


def test_no_cap_no_edit_except_anthropic(make_plan: Planner) -> None:
    assert make_plan({}, user_body(), "vllm").set_fields == {}
    # Anthropic requires max_tokens, so one is always sent.
    assert make_plan({}, user_body(), "anthropic").set_fields == {"max_tokens": 4096}


def test_value_under_the_ceiling_is_kept(make_plan: Planner) -> None:
    decision = make_plan(CAPS, user_body(max_tokens=1500))
    assert decision.set_fields == {} and decision.clamps == ()
    assert decision.max_output_tokens == 1500


@pytest.mark.parametrize(
    ("family", "caps", "sent", "field"),
    [
        ("openai", {}, "max_tokens", "max_tokens"),
        ("openai", {}, "max_completion_tokens", "max_completion_tokens"),
        ("vllm", {}, "max_completion_tokens", "max_completion_tokens"),
        ("sglang", {}, "max_tokens", "max_tokens"),
        ("anthropic", {}, "max_tokens", "max_tokens"),
    ],
)
def test_clamp_to_the_ceiling_is_reported(
    make_plan: Planner, family: str, caps: dict, sent: str, field: str
) -> None:
    decision = make_plan(CAPS, user_body(**{sent: 9000}), family, caps)
    assert decision.set_fields[field] == 2000
    assert decision.clamps == (Clamp(field, 9000, 2000, "ceiling of rule 'defaults'"),)


def test_openai_reasoning_model_moves_max_tokens(make_plan: Planner) -> None:
    decision = make_plan(CAPS, user_body(max_tokens=300), "openai", GPT5)
    assert decision.set_fields["max_completion_tokens"] == 300
    assert decision.remove == {"max_tokens"}


def test_anthropic_moves_max_completion_tokens(make_plan: Planner) -> None:
    decision = make_plan(CAPS, user_body(max_completion_tokens=9000), "anthropic")
    assert decision.set_fields["max_tokens"] == 2000
    assert decision.remove == {"max_completion_tokens"}
    assert decision.clamps[0].original == 9000


def test_strict_rejects_instead_of_clamping(make_plan: Planner) -> None:
    policy = {"rules": [{"name": "ci", "strict": True, "max_tokens": {"ceiling": 1000}}]}
    decision = make_plan(policy, user_body(max_completion_tokens=4000))
    assert decision.rejected and decision.rejection is not None
    assert decision.rejection.field == "max_completion_tokens"
    assert "max_completion_tokens 4000 is over the ceiling of 1000 set by rule 'ci'" in (
        decision.rejection.message
    )
    assert decision.set_fields == {} and decision.remove == frozenset() and decision.clamps == ()


def test_strict_accepts_values_under_the_ceiling(make_plan: Planner) -> None:
    policy = {"defaults": {"strict": True, "max_tokens": {"ceiling": 1000}}}
    assert not make_plan(policy, user_body(max_tokens=1000)).rejected


@pytest.mark.parametrize(("family", "added"), [("vllm", 800), ("sglang", 800), ("openai", 0)])
def test_thinking_budget_is_added_where_the_backend_counts_it(
    make_plan: Planner, family: str, added: int
) -> None:
    policy = {"defaults": {**CAPS["defaults"], "thinking_budget": 800}}
    caps = {"supports_reasoning": True}
    decision = make_plan(policy, user_body(), family, caps)
    field = "max_completion_tokens" if family == "openai" else "max_tokens"
    assert decision.set_fields[field] == 500 + added
    clamped = make_plan(policy, user_body(max_tokens=5000), family, caps)
    assert clamped.clamps[0].new == 2000 + added


def test_anthropic_counts_its_thinking_budget(make_plan: Planner) -> None:
    policy = {"defaults": {**CAPS["defaults"], "thinking_budget": 2000}}
    decision = make_plan(policy, user_body(), "anthropic", SONNET_45)
    assert decision.set_fields["max_tokens"] == 2500
    assert decision.set_fields["thinking"] == {"type": "enabled", "budget_tokens": 2000}


def test_policy_values_respect_the_model_limit(make_plan: Planner) -> None:
    policy = {"defaults": {"max_tokens": {"default": 9000}}}
    decision = make_plan(policy, user_body(), "vllm", {"max_output_tokens": 4096})
    assert decision.set_fields["max_tokens"] == 4096
    assert any("model's limit 4096" in note for note in decision.notes)


def test_boolean_is_not_a_token_count(make_plan: Planner) -> None:
    decision = make_plan(CAPS, user_body(max_tokens=True))
    assert decision.set_fields["max_tokens"] == 500


def test_draft_edits_are_minimal() -> None:
    draft = Draft({"a": 1, "b": 2})
    draft.set("a", 1)
    draft.set("c", 3)
    draft.drop("b")
    draft.drop("missing")
    assert (draft.set_fields, draft.remove) == ({"c": 3}, {"b"})
    assert (draft.current("a"), draft.current("b"), draft.current("c")) == (1, None, 3)
    draft.set("b", 5)
    assert (draft.set_fields, draft.remove) == ({"c": 3, "b": 5}, set())
