"""Effort and thinking caps, written in each backend's dialect; pinned effort per task."""

from __future__ import annotations

import pytest

from gateway.policy import (
    Clamp,
    budget_for_effort,
    effort_for_budget,
    nearest_supported,
    pinned_effort,
    supported_efforts,
)
from tests.unit.policy.helpers import GPT5, OPUS_47, SONNET_45, Planner, tool_body, user_body


def effort(level: str, **more: object) -> dict:
    return {"defaults": {"effort": level, **more}}


# OpenAI


@pytest.mark.parametrize(
    ("level", "caps", "sent"),
    [
        ("medium", GPT5, "medium"),
        ("max", GPT5, "high"),
        ("xhigh", {**GPT5, "supports_xhigh_reasoning_effort": True}, "xhigh"),
        ("max", {**GPT5, "supports_xhigh_reasoning_effort": True}, "xhigh"),
        ("none", GPT5, "minimal"),
        ("none", {"supports_reasoning": True, "supports_none_reasoning_effort": True}, "none"),
        ("minimal", {"supports_reasoning": True}, "low"),
        ("high", {"supports_reasoning": True, "reasoning_effort_levels": ["low", "max"]}, "low"),
    ],
)
def test_openai_effort_maps_to_an_accepted_level(
    make_plan: Planner, level: str, caps: dict, sent: str
) -> None:
    decision = make_plan(effort(level), user_body(), "openai", caps)
    assert decision.set_fields["reasoning_effort"] == sent
    assert decision.effort == level
    assert (sent != level) == any("not offered" in note for note in decision.notes)


def test_openai_non_reasoning_model_gets_no_effort(make_plan: Planner) -> None:
    decision = make_plan(effort("low"), user_body(), "openai", {})
    assert "reasoning_effort" not in decision.set_fields
    assert any("does not reason" in note for note in decision.notes)


def test_openai_budget_becomes_an_effort(make_plan: Planner) -> None:
    decision = make_plan({"defaults": {"thinking_budget": 1500}}, user_body(), "openai", GPT5)
    assert decision.set_fields["reasoning_effort"] == "low"
    assert decision.thinking_budget is None
    assert any("no thinking budget" in note for note in decision.notes)


def test_client_effort_is_capped_not_raised(make_plan: Planner) -> None:
    lower = make_plan(effort("medium"), user_body(reasoning_effort="low"), "openai", GPT5)
    assert "reasoning_effort" not in lower.set_fields and lower.clamps == ()
    higher = make_plan(effort("medium"), user_body(reasoning_effort="high"), "openai", GPT5)
    assert higher.set_fields["reasoning_effort"] == "medium"
    assert higher.clamps == (
        Clamp("reasoning_effort", "high", "medium", "effort cap of rule 'defaults'"),
    )


def test_strict_rejects_a_higher_effort(make_plan: Planner) -> None:
    policy = effort("low", strict=True)
    decision = make_plan(policy, user_body(reasoning_effort={"effort": "high"}), "openai", GPT5)
    assert decision.rejection is not None
    assert decision.rejection.field == "reasoning_effort"
    assert "'high' is over 'low'" in decision.rejection.message


# vLLM and SGLang


def test_vllm_effort_none_switches_thinking_off_in_template_kwargs(make_plan: Planner) -> None:
    body = user_body(chat_template_kwargs={"custom": 1})
    decision = make_plan(effort("none", thinking_budget=2000), body, "vllm")
    assert decision.set_fields == {"chat_template_kwargs": {"custom": 1, "enable_thinking": False}}
    assert decision.thinking_budget is None and not decision.stream_enforcement


def test_vllm_budget_sent_where_supported(make_plan: Planner) -> None:
    caps = {"supports_thinking_budget": True}
    decision = make_plan(effort("medium"), user_body(), "vllm", caps)
    assert decision.set_fields == {"reasoning_effort": "medium", "thinking_token_budget": 4096}
    assert decision.thinking_budget == budget_for_effort("medium")
    assert not decision.stream_enforcement


def test_vllm_budget_enforced_on_the_stream_otherwise(make_plan: Planner) -> None:
    decision = make_plan(effort("xhigh", thinking_budget=700), user_body(), "vllm")
    assert decision.set_fields == {"reasoning_effort": "high"}
    assert decision.thinking_budget == 700
    assert decision.stream_enforcement


def test_vllm_client_budget_is_clamped(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 1000}}
    decision = make_plan(policy, user_body(thinking_token_budget=5000), "vllm")
    assert decision.set_fields == {"thinking_token_budget": 1000}
    assert decision.clamps[0] == Clamp(
        "thinking_token_budget", 5000, 1000, "thinking budget of rule 'defaults'"
    )
    smaller = make_plan(policy, user_body(thinking_token_budget=300), "vllm")
    assert smaller.set_fields == {} and smaller.thinking_budget == 300


def test_strict_rejects_a_larger_budget(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 1000, "strict": True}}
    decision = make_plan(policy, user_body(thinking_token_budget=5000), "vllm")
    assert decision.rejection is not None
    assert decision.rejection.field == "thinking_token_budget"


def test_vllm_non_reasoning_model(make_plan: Planner) -> None:
    decision = make_plan(effort("low"), user_body(), "vllm", {"supports_reasoning": False})
    assert decision.set_fields == {} and decision.thinking_budget is None


def test_sglang_writes_template_kwargs_and_effort(make_plan: Planner) -> None:
    body = user_body(chat_template_kwargs={"enable_thinking": True})
    decision = make_plan(effort("low", thinking_budget=900), body, "sglang")
    assert decision.set_fields == {
        "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": True, "thinking_budget": 900},
    }
    assert decision.stream_enforcement
    off = make_plan(effort("none"), body, "sglang")
    assert off.set_fields == {"chat_template_kwargs": {"enable_thinking": False}}


def test_sglang_client_budget_clamp_names_the_nested_field(make_plan: Planner) -> None:
    body = user_body(chat_template_kwargs={"thinking_budget": 9000})
    decision = make_plan({"defaults": {"thinking_budget": 1000}}, body, "sglang")
    assert decision.clamps[0].field == "chat_template_kwargs.thinking_budget"
    assert decision.set_fields["chat_template_kwargs"] == {"thinking_budget": 1000}


def test_client_switching_thinking_off_is_respected(make_plan: Planner) -> None:
    body = user_body(chat_template_kwargs={"enable_thinking": False})
    decision = make_plan(effort("high", thinking_budget=4000), body, "vllm")
    assert decision.effort == "none"
    assert decision.set_fields == {} and decision.thinking_budget is None


# Anthropic (through litellm's OpenAI-shaped input)


def test_anthropic_effort_becomes_a_budget(make_plan: Planner) -> None:
    decision = make_plan(effort("low"), user_body(), "anthropic", SONNET_45)
    assert decision.set_fields["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert decision.set_fields["max_tokens"] == 4096 + 1024
    assert not decision.stream_enforcement


def test_anthropic_budget_raised_to_the_minimum(make_plan: Planner) -> None:
    decision = make_plan(
        {"defaults": {"thinking_budget": 300}}, user_body(), "anthropic", SONNET_45
    )
    assert decision.set_fields["thinking"]["budget_tokens"] == 1024
    assert any("minimum 1024" in note for note in decision.notes)


def test_anthropic_budget_lowered_under_the_clients_max_tokens(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 4096}}
    decision = make_plan(policy, user_body(max_tokens=3000), "anthropic", SONNET_45)
    assert decision.set_fields == {"thinking": {"type": "enabled", "budget_tokens": 2999}}
    assert decision.thinking_budget == 2999
    (clamp,) = decision.clamps  # said as a clamp: the rule's budget did not fit
    assert (clamp.field, clamp.original, clamp.new) == ("thinking.budget_tokens", 4096, 2999)
    assert decision.thinking_enforcement == "backend"


def test_anthropic_thinking_left_off_when_max_tokens_is_too_small(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 4096}}
    body = user_body(max_tokens=1000, reasoning_effort="low")
    decision = make_plan(policy, body, "anthropic", SONNET_45)
    assert decision.set_fields == {} and decision.remove == {"reasoning_effort"}
    assert decision.thinking_budget is None
    assert any("thinking left off" in clamp.reason for clamp in decision.clamps)
    assert decision.thinking_enforcement is None  # no budget, nothing claimed


def test_anthropic_thinking_cleans_sampling_and_effort(make_plan: Planner) -> None:
    body = user_body(temperature=0.2, top_k=5, reasoning_effort="high")
    decision = make_plan(effort("medium"), body, "anthropic", SONNET_45)
    assert decision.remove == {"temperature", "top_k", "reasoning_effort"}
    assert decision.clamps[0].field == "reasoning_effort"
    kept = make_plan(effort("medium"), user_body(temperature=1), "anthropic", SONNET_45)
    assert "temperature" not in kept.remove


def test_anthropic_client_budget_clamp(make_plan: Planner) -> None:
    body = user_body(max_tokens=20000, thinking={"type": "enabled", "budget_tokens": 16000})
    decision = make_plan({"defaults": {"thinking_budget": 4000}}, body, "anthropic", SONNET_45)
    assert decision.clamps == (
        Clamp("thinking.budget_tokens", 16000, 4000, "thinking budget of rule 'defaults'"),
    )
    assert decision.set_fields["thinking"] == {"type": "enabled", "budget_tokens": 4000}


@pytest.mark.parametrize(
    ("caps", "body", "fields", "removed"),
    [
        (SONNET_45, user_body(), {}, set()),
        (
            SONNET_45,
            user_body(thinking={"type": "enabled", "budget_tokens": 2000}),
            {"thinking": {"type": "disabled"}},
            set(),
        ),
        (
            {**SONNET_45, "thinking_on_by_default": True},
            user_body(),
            {"thinking": {"type": "disabled"}},
            set(),
        ),
        (SONNET_45, user_body(reasoning_effort="low"), {}, {"reasoning_effort"}),
    ],
)
def test_anthropic_effort_none(
    make_plan: Planner, caps: dict, body: dict, fields: dict, removed: set
) -> None:
    decision = make_plan(effort("none"), body, "anthropic", caps)
    assert {k: v for k, v in decision.set_fields.items() if k != "max_tokens"} == fields
    assert decision.remove == removed


def test_anthropic_adaptive_models_take_reasoning_effort(make_plan: Planner) -> None:
    body = user_body(thinking={"type": "enabled", "budget_tokens": 5000}, max_tokens=30000)
    decision = make_plan(effort("max"), body, "anthropic", OPUS_47)
    assert decision.set_fields == {"reasoning_effort": "max"}
    assert decision.remove == {"thinking"}
    minimal = make_plan(effort("minimal"), user_body(), "anthropic", OPUS_47)
    assert minimal.set_fields["reasoning_effort"] == "low"
    assert minimal.set_fields["max_tokens"] == 4096 + budget_for_effort("low")


def test_anthropic_adaptive_keeps_a_client_adaptive_thinking(make_plan: Planner) -> None:
    body = user_body(thinking={"type": "adaptive", "display": "summarized"})
    decision = make_plan(effort("high"), body, "anthropic", OPUS_47)
    assert "thinking" not in decision.remove and decision.set_fields["reasoning_effort"] == "high"


def test_anthropic_budget_only_picks_an_effort_on_adaptive_models(make_plan: Planner) -> None:
    decision = make_plan({"defaults": {"thinking_budget": 9000}}, user_body(), "anthropic", OPUS_47)
    assert decision.set_fields["reasoning_effort"] == "high"
    assert decision.set_fields["max_tokens"] == 4096 + 9000


def test_always_on_model_cannot_switch_thinking_off(make_plan: Planner) -> None:
    caps = {**OPUS_47, "thinking_always_on": True}
    decision = make_plan(effort("none"), user_body(), "anthropic", caps)
    assert decision.set_fields["reasoning_effort"] == "low"
    assert any("always thinks" in note for note in decision.notes)


@pytest.mark.parametrize("caps", [SONNET_45, OPUS_47])
def test_anthropic_clients_own_thinking_is_left_alone(make_plan: Planner, caps: dict) -> None:
    body = user_body(max_tokens=9000, thinking={"type": "enabled", "budget_tokens": 3000})
    decision = make_plan({"defaults": {"max_tokens": {"ceiling": 8000}}}, body, "anthropic", caps)
    assert decision.set_fields == {} and decision.remove == frozenset()
    assert decision.thinking_budget == 3000 and decision.clamps == ()


def test_client_disabled_thinking_counts_as_effort_none(make_plan: Planner) -> None:
    body = user_body(thinking={"type": "disabled"})
    decision = make_plan(effort("high"), body, "anthropic", SONNET_45)
    assert decision.effort == "none" and "thinking" not in decision.set_fields


def test_anthropic_non_reasoning_model(make_plan: Planner) -> None:
    decision = make_plan(effort("high"), user_body(), "anthropic", {})
    assert decision.set_fields == {"max_tokens": 4096}


def test_other_family_gets_reasoning_effort_only(make_plan: Planner) -> None:
    decision = make_plan(effort("high", thinking_budget=100), user_body(), "other")
    assert decision.set_fields == {"reasoning_effort": "high"}
    assert decision.thinking_budget is None


# Pinned effort


def test_pinned_effort_keeps_the_tasks_first_effort(make_plan: Planner) -> None:
    policy = {
        "defaults": {"pin_effort_per_task": True, "effort": "high"},
        "rules": [{"match": {"step": "tool_result"}, "effort": "low", "thinking_budget": 512}],
    }
    first = make_plan(policy, user_body(), "vllm")
    assert (first.effort, first.pin_effort) == ("high", True)
    later = make_plan(policy, tool_body(), "vllm", task_effort=first.effort)
    assert later.effort == "high"
    assert later.set_fields["reasoning_effort"] == "high"
    assert later.thinking_budget == 512  # the budget still varies per step
    assert any("pinned" in note for note in later.notes)
    unpinned = make_plan(
        {**policy, "defaults": {"effort": "high"}}, tool_body(), "vllm", task_effort="high"
    )
    assert unpinned.effort == "low"


def test_pinning_keeps_a_clients_own_first_effort(make_plan: Planner) -> None:
    policy = {"defaults": {"pin_effort_per_task": True}}
    decision = make_plan(policy, user_body(reasoning_effort="low"), "openai", GPT5)
    assert decision.effort == "low" and decision.set_fields == {}


def test_pinned_effort_helper() -> None:
    assert pinned_effort("low", None) == "low"
    assert pinned_effort("low", "high") == "high"
    assert pinned_effort(None, None) is None


# Level helpers


def test_nearest_supported_never_rounds_thinking_down_to_none() -> None:
    assert nearest_supported("minimal", ("none", "low", "medium")) == "low"
    assert nearest_supported("max", ("low", "medium", "high")) == "high"
    assert nearest_supported("none", ("minimal", "low")) == "minimal"
    assert nearest_supported("medium", ()) == "medium"


def test_effort_budget_round_trip() -> None:
    assert effort_for_budget(100) == "minimal"
    assert effort_for_budget(1024) == "low"
    assert effort_for_budget(10**6) == "max"
    assert budget_for_effort("none") == 0


def test_supported_efforts_per_family() -> None:
    assert supported_efforts("vllm", {}) == ("none", "low", "medium", "high")
    assert supported_efforts("openai", {}) == ("low", "medium", "high")
    assert supported_efforts("anthropic", OPUS_47)[-2:] == ("xhigh", "max")
    assert supported_efforts("anthropic", {"thinking_always_on": True})[0] == "low"
    assert len(supported_efforts("other", {})) == 7
