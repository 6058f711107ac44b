"""Speed tiers: force, forbid and choose; native parameters per family; tier pools."""

from __future__ import annotations

import pytest

from gateway.policy import ANTHROPIC_FAST_BETA, RouteSettings
from gateway.policy.tiers import offered_tiers
from tests.unit.policy.helpers import Planner, user_body

ASK = {"X-Speed-Tier": "priority"}


def tier(**rule: object) -> dict:
    return {"defaults": {"tier": rule}}


def test_no_ask_no_rule_is_implicit_standard_without_edits(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(), "openai")
    assert (decision.tier, decision.tier_requested, decision.set_fields) == ("standard", None, {})


def test_client_ask_is_honoured(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(), "openai", headers=ASK)
    assert (decision.tier, decision.tier_requested) == ("priority", "priority")
    assert decision.set_fields == {"service_tier": "priority"}


def test_a_field_the_client_already_sent_is_not_rewritten(make_plan: Planner) -> None:
    decision = make_plan(tier(choose="flex"), user_body(service_tier="flex"), "openai")
    assert decision.tier == "flex" and decision.set_fields == {}


def test_choose_applies_only_when_nothing_was_asked(make_plan: Planner) -> None:
    policy = tier(choose="flex")
    assert make_plan(policy, user_body(), "openai").set_fields == {"service_tier": "flex"}
    assert make_plan(policy, user_body(), "openai", headers=ASK).tier == "priority"


def test_force_overrides_the_ask(make_plan: Planner) -> None:
    decision = make_plan(tier(force="flex"), user_body(), "openai", headers=ASK)
    assert decision.tier == "flex" and decision.tier_requested == "priority"
    assert any("forced to flex" in note for note in decision.notes)


def test_forbidden_ask_falls_back_to_choose(make_plan: Planner) -> None:
    decision = make_plan(
        tier(forbid=["priority"], choose="flex"), user_body(), "openai", headers=ASK
    )
    assert decision.tier == "flex"
    assert any("forbidden" in note for note in decision.notes)
    plain = make_plan(tier(forbid=["priority"]), user_body(), "openai", headers=ASK)
    assert plain.tier == "standard" and plain.set_fields == {}


def test_strict_rejects_a_forbidden_tier(make_plan: Planner) -> None:
    decision = make_plan(
        tier(forbid=["priority", "fast"]) | {"rules": [{"strict": True}]},
        user_body(),
        "openai",
        headers=ASK,
    )
    assert decision.rejection is not None and decision.rejection.field == "X-Speed-Tier"
    assert "ask for one of flex, standard" in decision.rejection.message
    body_ask = make_plan(
        {"defaults": {"strict": True, "tier": {"forbid": ["flex"]}}},
        user_body(service_tier="flex"),
        "openai",
    )
    assert body_ask.rejection is not None and body_ask.rejection.field == "service_tier"


def test_unknown_tier_is_ignored_or_rejected(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(), "openai", headers={"X-Speed-Tier": "turbo"})
    assert decision.tier == "standard" and any("unknown speed tier" in n for n in decision.notes)
    strict = make_plan(
        {"defaults": {"strict": True}}, user_body(), headers={"X-Speed-Tier": "turbo"}
    )
    assert strict.rejected


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        ({"service_tier": "flex"}, "flex"),
        ({"service_tier": "default"}, "standard"),
        ({"service_tier": "auto"}, None),
        ({"service_tier": "scale"}, "priority"),
        ({"speed": "fast"}, "fast"),
    ],
)
def test_body_fields_count_as_an_ask(make_plan: Planner, body: dict, asked: str | None) -> None:
    assert make_plan({}, user_body(**body), "anthropic").tier_requested == asked


@pytest.mark.parametrize(
    ("family", "served", "body", "fields", "removed"),
    [
        ("openai", "flex", {}, {"service_tier": "flex"}, set()),
        ("openai", "priority", {"service_tier": "flex"}, {"service_tier": "priority"}, set()),
        ("openai", "standard", {"service_tier": "priority"}, {"service_tier": "default"}, set()),
        ("openai", "standard", {}, {}, set()),
        ("anthropic", "priority", {}, {"service_tier": "auto"}, set()),
        ("anthropic", "standard", {"speed": "fast"}, {"service_tier": "default"}, {"speed"}),
        ("anthropic", "fast", {}, {"speed": "fast"}, set()),
    ],
)
def test_native_tier_parameters(
    make_plan: Planner, family: str, served: str, body: dict, fields: dict, removed: set
) -> None:
    decision = make_plan(tier(force=served), user_body(**body), family)
    assert decision.tier == served
    assert {k: v for k, v in decision.set_fields.items() if k != "max_tokens"} == fields
    assert decision.remove == removed


def test_anthropic_fast_mode_adds_the_beta_header(make_plan: Planner) -> None:
    headers = {"X-Speed-Tier": "fast", "anthropic-beta": "prompt-caching-2024-07-31"}
    decision = make_plan({}, user_body(), "anthropic", headers=headers)
    assert decision.headers == {
        "anthropic-beta": f"prompt-caching-2024-07-31,{ANTHROPIC_FAST_BETA}"
    }
    assert ANTHROPIC_FAST_BETA == "fast-mode-2026-02-01"


def test_tier_not_offered_serves_standard(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(), "vllm", headers=ASK)
    assert decision.tier == "standard" and decision.set_fields == {}
    assert any("does not offer the priority tier" in note for note in decision.notes)
    no_fast = make_plan(
        {}, user_body(), "anthropic", {"supports_speed": False}, headers={"X-Speed-Tier": "fast"}
    )
    assert no_fast.tier == "standard"


def test_configured_tier_pool_and_fields(make_plan: Planner) -> None:
    policy = {
        "routing": {
            "qwen": {
                "tiers": {
                    "fast": {"alias": "qwen-h200", "headers": {"x-pool": "h200"}},
                    "flex": {"set": {"service_tier": "flex", "priority": 10}},
                }
            }
        }
    }
    fast = make_plan(policy, user_body(), "vllm", alias="qwen", headers={"X-Speed-Tier": "fast"})
    assert (fast.tier, fast.alias, fast.headers) == ("fast", "qwen-h200", {"x-pool": "h200"})
    flex = make_plan(policy, user_body(), "vllm", alias="qwen", headers={"X-Speed-Tier": "flex"})
    assert flex.set_fields == {"service_tier": "flex", "priority": 10} and flex.alias == "qwen"


def test_fields_of_other_tiers_are_removed(make_plan: Planner) -> None:
    policy = {"routing": {"q": {"tiers": {"flex": {"set": {"service_tier": "flex"}}}}}}
    body = user_body(service_tier="flex")
    decision = make_plan(policy, body, "vllm", alias="q", headers={"X-Speed-Tier": "standard"})
    assert decision.tier == "standard" and decision.remove == {"service_tier"}


def test_withdrawn_native_tier() -> None:
    route = RouteSettings.model_validate(
        {"tiers": {"flex": {"enabled": False}, "fast": {"alias": "x"}}}
    )
    assert offered_tiers("openai", route, {}) == ("standard", "priority", "fast")


@pytest.mark.parametrize("asked", ["priority", "scale", "fast", "PRIORITY"])
def test_a_forbidden_body_service_tier_is_rewritten_not_forwarded(
    make_plan: Planner, asked: str
) -> None:
    decision = make_plan(tier(forbid=["priority"]), user_body(service_tier=asked), "openai")
    assert (decision.tier, decision.tier_requested) == ("standard", "priority")
    assert decision.set_fields == {"service_tier": "default"}
    assert any("forbidden" in note for note in decision.notes)


def test_a_strict_rule_refuses_a_forbidden_body_service_tier(make_plan: Planner) -> None:
    policy = {"defaults": {"strict": True, "tier": {"forbid": ["priority"]}}}
    decision = make_plan(policy, user_body(service_tier="priority"), "openai")
    assert decision.rejection is not None and decision.rejection.field == "service_tier"


def test_auto_passes_unless_the_rule_forbids_what_it_may_pick(make_plan: Planner) -> None:
    assert make_plan({}, user_body(service_tier="auto"), "openai").set_fields == {}
    forbids = make_plan(tier(forbid=["priority"]), user_body(service_tier="auto"), "openai")
    assert forbids.set_fields == {"service_tier": "default"}


def test_an_unknown_body_service_tier_is_not_forwarded(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(service_tier="turbo"), "openai")
    assert decision.set_fields == {"service_tier": "default"}
    strict = make_plan({"defaults": {"strict": True}}, user_body(service_tier="turbo"), "openai")
    assert strict.rejection is not None and strict.rejection.field == "service_tier"


def test_self_hosted_pools_drop_the_clients_tier_fields(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(service_tier="priority", speed="fast"), "vllm")
    assert decision.tier == "standard"
    assert decision.remove == frozenset({"service_tier", "speed"})


def test_speed_reaches_only_anthropic(make_plan: Planner) -> None:
    decision = make_plan({}, user_body(speed="fast"), "openai")
    assert "speed" in decision.remove and decision.tier == "standard"
    fast = make_plan({}, user_body(speed="fast"), "anthropic")
    assert fast.tier == "fast" and fast.headers["anthropic-beta"] == ANTHROPIC_FAST_BETA


@pytest.mark.parametrize("asked", ["batch", "ultrafast"])
def test_batch_and_ultrafast_are_refused_where_not_offered(make_plan: Planner, asked: str) -> None:
    decision = make_plan({}, user_body(), "openai", headers={"X-Speed-Tier": asked})
    assert decision.rejection is not None and decision.rejection.field == "X-Speed-Tier"
    assert asked in decision.rejection.message


def test_batch_routes_to_its_pool_and_ultrafast_where_the_map_prices_it(
    make_plan: Planner,
) -> None:
    routing = {"routing": {"m": {"tiers": {"batch": {"alias": "m-batch"}}}}}
    batch = make_plan(routing, user_body(), "vllm", headers={"X-Speed-Tier": "batch"})
    assert (batch.tier, batch.alias, batch.rejection) == ("batch", "m-batch", None)
    priced = {"input_cost_per_token_ultrafast": 6e-6}
    ultra = make_plan({}, user_body(), "openai", priced, headers={"X-Speed-Tier": "ultrafast"})
    assert ultra.tier == "ultrafast" and ultra.set_fields == {"service_tier": "ultrafast"}


def test_fast_is_offered_where_the_map_says_so_or_does_not_know_the_model() -> None:
    route = RouteSettings()
    listed = {"litellm_provider": "anthropic", "supports_speed": True}
    unlisted = {"litellm_provider": "anthropic"}  # a map entry without fast mode
    assert "fast" in offered_tiers("anthropic", route, listed)
    assert "fast" not in offered_tiers("anthropic", route, unlisted)
    assert "fast" in offered_tiers("anthropic", route, {})  # unknown to the map
    assert "fast" not in offered_tiers("anthropic", route, {"supports_speed": False})


def test_a_forbidden_body_speed_is_dropped_on_anthropic(make_plan: Planner) -> None:
    decision = make_plan(tier(forbid=["fast"]), user_body(speed="fast"), "anthropic")
    assert (decision.tier, decision.tier_requested) == ("standard", "fast")
    assert "speed" in decision.remove and "anthropic-beta" not in decision.headers
    assert decision.set_fields["service_tier"] == "default"  # beside Anthropic's max_tokens
