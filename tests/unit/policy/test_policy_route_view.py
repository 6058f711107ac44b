"""What the planner keeps per route: the same plans as computing it every time.

`route_capabilities` hands back one read-only entry per map and model; `plan` keeps the
merged capabilities and offered tiers for a read-only entry by policy and entry identity,
and recomputes them for a plain dict (which could change between calls). A reload (a new
policy object) is tested end to end in tests/e2e/test_policy_reload_cache.py.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from gateway.config import GatewayConfig
from gateway.policy import RequestFacts
from gateway.policy.plan import plan
from gateway.policy.planner import plan_route, route_capabilities
from gateway.policy.schema import Policy
from gateway.pricing import load_model_map
from tests.unit.policy.helpers import user_body

CONFIG = {
    "models": {
        "sonnet": {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        "local": {"provider": "openai", "model": "not-in-any-map", "base_url": "http://x/v1"},
    },
    "defaults": {"effort": "medium"},
}


def test_route_capabilities_are_one_read_only_entry_per_map_and_model() -> None:
    config = GatewayConfig.model_validate(CONFIG)
    model_map = load_model_map()
    sonnet = route_capabilities(config.models["sonnet"], model_map)
    assert sonnet is route_capabilities(config.models["sonnet"], model_map)
    assert sonnet["supports_reasoning"] is True
    with pytest.raises(TypeError):
        sonnet["supports_reasoning"] = False  # type: ignore[index]
    unknown = route_capabilities(config.models["local"], model_map)
    assert unknown == {} and unknown is route_capabilities(config.models["local"], model_map)
    # Another map (a reloaded price book) is looked up afresh.
    other = {"claude-sonnet-4-5": {"litellm_provider": "anthropic", "supports_reasoning": False}}
    assert route_capabilities(config.models["sonnet"], other)["supports_reasoning"] is False


def test_a_kept_route_view_plans_as_a_fresh_one() -> None:
    config = GatewayConfig.model_validate(CONFIG)
    model_map = load_model_map()
    facts = RequestFacts.from_headers("sonnet", {"X-Speed-Tier": "priority"})
    body = user_body(model="sonnet")
    first = plan_route(config, model_map, facts, body)
    again = plan_route(config, model_map, facts, body)  # from what the first kept
    fresh = plan(
        config.policy, facts, body, "anthropic",
        dict(route_capabilities(config.models["sonnet"], model_map)),
    )  # fmt: skip
    assert first == again
    planned = {**fresh.set_fields, "model": "claude-sonnet-4-5"}  # plan_route names the model
    assert (first.tier, first.set_fields, first.notes) == (fresh.tier, planned, fresh.notes)


def test_the_adaptive_note_is_on_every_plan_not_only_the_first() -> None:
    caps = {"supports_adaptive_thinking": True}  # claimed by the route, unknown to litellm
    policy = Policy.model_validate(
        {"defaults": {"effort": "medium"}, "routing": {"m": {"capabilities": caps}}}
    )
    entry = MappingProxyType({"litellm_provider": "anthropic"})
    for _ in range(2):
        decision = plan(policy, RequestFacts.from_headers("m", {}), user_body(), "anthropic", entry)
        assert decision.set_fields["thinking"]["type"] == "enabled"
        assert sum("supports_adaptive_thinking ignored" in n for n in decision.notes) == 1


def test_a_plain_dict_is_read_on_every_call() -> None:
    policy = Policy.model_validate({})
    facts = RequestFacts.from_headers("m", {"X-Speed-Tier": "ultrafast"})
    caps: dict[str, object] = {}
    refused = plan(policy, facts, user_body(), "openai", caps)
    assert refused.rejection is not None  # not offered: refused
    caps["input_cost_per_token_ultrafast"] = 1e-5  # the map now prices it
    served = plan(policy, facts, user_body(), "openai", caps)
    assert served.rejection is None and served.tier == "ultrafast"
    # A new policy object (what a reload builds) gets its own view of a kept entry.
    entry = MappingProxyType({"input_cost_per_token_ultrafast": 1e-5})
    assert plan(policy, facts, user_body(), "openai", entry).tier == "ultrafast"
    withdrawn = Policy.model_validate(
        {"routing": {"m": {"tiers": {"ultrafast": {"enabled": False}}}}}
    )
    assert plan(withdrawn, facts, user_body(), "openai", entry).rejection is not None
