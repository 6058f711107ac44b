"""Backend rules: who holds a thinking budget, bodies each backend accepts, one planner."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rich.console import Console

from gateway.config import GatewayConfig
from gateway.policy import RequestFacts, explain, render_decision
from gateway.policy.backends import ANTHROPIC_MIN_BUDGET, thinking_enforcement
from gateway.policy.planner import plan_route, route_capabilities
from gateway.pricing import load_model_map
from tests.unit.policy.helpers import OPUS_47, SONNET_45, Planner, tool_body, user_body


@pytest.mark.parametrize(
    ("family", "caps", "streamed", "expected"),
    [
        ("anthropic", SONNET_45, False, "backend"),
        ("anthropic", OPUS_47, True, "hint"),  # adaptive: an effort, no token cap
        ("vllm", {"supports_thinking_budget": True}, False, "backend"),
        ("vllm", {"supports_continue_final_message": True}, True, "stream"),
        ("vllm", {"supports_continue_final_message": True}, False, "hint"),  # not a stream
        ("sglang", {"supports_thinking_budget": True}, False, "backend"),
        ("sglang", {"supports_continue_final_message": True}, True, "stream"),
        ("sglang", {}, True, "hint"),  # no strict thinking, no continuation
        ("openai", {"supports_reasoning": True}, True, "hint"),
        ("other", {}, True, "hint"),
    ],
)
def test_who_holds_the_budget(
    family: Any, caps: dict[str, Any], streamed: bool, expected: str
) -> None:
    assert thinking_enforcement(family, caps, 2048, streamed=streamed) == expected
    assert thinking_enforcement(family, caps, None, streamed=streamed) is None


def test_plan_reports_the_enforcement(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 8}}
    hinted = make_plan(policy, user_body(stream=True), "sglang", {"supports_reasoning": True})
    assert (hinted.thinking_budget, hinted.thinking_enforcement) == (8, "hint")
    assert hinted.set_fields["chat_template_kwargs"] == {"thinking_budget": 8}
    assert "custom_params" not in hinted.set_fields
    strict = make_plan(policy, user_body(), "sglang", {"supports_thinking_budget": True})
    assert strict.thinking_enforcement == "backend"
    assert strict.set_fields["custom_params"] == {"thinking_budget": 8}
    openai = make_plan(policy, user_body(), "openai", {"supports_reasoning": True})
    assert openai.thinking_enforcement == "hint" and openai.thinking_budget is None


@pytest.mark.parametrize(
    ("max_tokens", "rule_budget", "client_thinking", "effort"),
    list(
        itertools.product(
            [None, 1, 1024, 1025, 2560, 5000],
            [None, 300, 4096, 20000],
            [
                None,
                {"type": "enabled", "budget_tokens": 4096},
                {"type": "enabled", "budget_tokens": 5},
            ],
            [None, "none", "low", "high"],
        )
    ),
)
def test_anthropic_bodies_are_always_accepted(
    make_plan: Planner,
    max_tokens: int | None,
    rule_budget: int | None,
    client_thinking: dict[str, Any] | None,
    effort: str | None,
) -> None:
    """Whatever the client and the rule ask, the body keeps 1024 <= budget < max_tokens."""
    fields: dict[str, Any] = {"reasoning_effort": "medium"}
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    if client_thinking is not None:
        fields["thinking"] = client_thinking
    defaults: dict[str, Any] = {"thinking_budget": rule_budget, "effort": effort}
    decision = make_plan({"defaults": defaults}, tool_body(**fields), "anthropic", SONNET_45)
    body = decision.apply(tool_body(**fields))
    assert "reasoning_effort" not in body  # never beside budgeted thinking
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        assert ANTHROPIC_MIN_BUDGET <= thinking["budget_tokens"] < body["max_tokens"]
        assert decision.thinking_budget == thinking["budget_tokens"]
        assert decision.thinking_enforcement == "backend"


def test_the_seed_case_is_lowered_with_a_clamp(make_plan: Planner) -> None:
    """Budget 4096 with max_tokens 2560 was refused upstream; now the budget fits."""
    decision = make_plan(
        {"defaults": {"thinking_budget": 4096}}, user_body(max_tokens=2560), "anthropic",
        {"supports_reasoning": True},
    )  # fmt: skip
    assert decision.set_fields["thinking"] == {"type": "enabled", "budget_tokens": 2559}
    assert [c.field for c in decision.clamps] == ["thinking.budget_tokens"]


def test_an_adaptive_override_litellm_cannot_send_falls_back_to_a_budget(
    make_plan: Planner,
) -> None:
    caps = {"supports_adaptive_thinking": True}  # claimed by the route, unknown to litellm
    policy = {"defaults": {"effort": "medium"}, "routing": {"m": {"capabilities": caps}}}
    decision = make_plan(policy, user_body(), "anthropic", {})
    assert "reasoning_effort" not in decision.set_fields
    assert decision.set_fields["thinking"]["type"] == "enabled"
    assert any("supports_adaptive_thinking ignored" in note for note in decision.notes)


CONFIG = {
    "models": {
        # Billed like Sonnet 4.5, but litellm looks up `anthropic/claude-sim`: unknown to it.
        "claude": {"provider": "anthropic", "model": "claude-sim", "base_url": "http://sim"},
        "sonnet": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "local": {"provider": "openai", "model": "sim-thinker", "base_url": "http://x/v1"},
    },
    "prices": {"claude": {"base": "claude-sonnet-4-5"}},
    "defaults": {"effort": "medium"},
}


def test_capabilities_come_from_the_upstream_model_not_the_price_key() -> None:
    config = GatewayConfig.model_validate(CONFIG)
    model_map = load_model_map()
    assert route_capabilities(config.models["claude"], model_map) == {}
    assert route_capabilities(config.models["sonnet"], model_map)["supports_reasoning"] is True
    facts = RequestFacts.from_headers("claude", {})
    body = user_body(model="claude")
    unknown = plan_route(config, model_map, facts, body)
    # litellm does not know claude-sim as a reasoning model: no effort, no thinking sent.
    assert "thinking" not in unknown.set_fields and "reasoning_effort" not in unknown.set_fields
    assert unknown.set_fields["model"] == "claude-sim"  # the same rename the live path makes
    known = plan_route(config, model_map, RequestFacts.from_headers("sonnet", {}), body)
    assert known.set_fields["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert known.set_fields["max_tokens"] > 4096


def test_explain_says_who_holds_the_budget(make_plan: Planner) -> None:
    decision = make_plan({"defaults": {"thinking_budget": 8}}, user_body(stream=True), "sglang")
    assert explain(decision)["thinking_enforcement"] == "hint"
    out = Console(width=200, force_terminal=False, color_system=None)
    with out.capture() as captured:
        render_decision(decision, out)
    text = captured.get()
    assert "thinking cap     hint: asked for only" in text
    assert "stream enforcement" not in text


def test_a_clients_strict_sglang_budget_is_clamped_in_the_open(make_plan: Planner) -> None:
    body = user_body(custom_params={"thinking_budget": 9000, "seed_hint": 1})
    caps = {"supports_thinking_budget": True}
    decision = make_plan({"defaults": {"thinking_budget": 512}}, body, "sglang", caps)
    assert decision.set_fields["custom_params"] == {"thinking_budget": 512, "seed_hint": 1}
    assert [(c.original, c.new) for c in decision.clamps] == [(9000, 512)]


def test_cut_without_continuation_is_stream_only_on_streams(make_plan: Planner) -> None:
    policy = {
        "defaults": {"thinking_budget": 8},
        "routing": {"m": {"thinking_overrun": "cut"}},
    }
    streamed = make_plan(policy, user_body(stream=True), "sglang", {"supports_reasoning": True})
    assert streamed.thinking_enforcement == "stream" and streamed.closes_at_budget
    whole = make_plan(policy, user_body(), "sglang", {"supports_reasoning": True})
    assert whole.thinking_enforcement == "hint" and not whole.closes_at_budget
    caps = {"supports_continue_final_message": True}
    continued = make_plan(policy, user_body(stream=True), "vllm", caps)
    assert continued.thinking_enforcement == "stream" and not continued.closes_at_budget
    hidden = make_plan(policy, user_body(stream=True), "openai", {"supports_reasoning": True})
    assert hidden.thinking_enforcement == "hint"  # OpenAI's reasoning is not streamed


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_a_clients_effort_on_a_budgeted_anthropic_model_becomes_its_budget(
    make_plan: Planner, effort: str
) -> None:
    """It was dropped with a note and nothing written: the upstream never thought."""
    from gateway.policy.effort import budget_for_effort

    body = user_body(reasoning_effort=effort, max_tokens=32_000)
    decision = make_plan({}, body, "anthropic", SONNET_45)
    budget = max(budget_for_effort(effort), ANTHROPIC_MIN_BUDGET)  # type: ignore[arg-type]
    assert decision.set_fields["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert "reasoning_effort" in decision.remove
    assert decision.thinking_enforcement == "backend"
    off = make_plan({}, user_body(reasoning_effort="none"), "anthropic", SONNET_45)
    assert "thinking" not in off.set_fields
