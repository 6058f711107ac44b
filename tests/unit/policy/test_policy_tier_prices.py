"""Batch and ultrafast through the one planner: served where offered and priced, else 400."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import GatewayConfig
from gateway.policy.facts import RequestFacts
from gateway.policy.planner import plan_route
from gateway.pricing import PriceBook

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def model_map() -> Any:
    return PriceBook().model_map  # litellm's bundled map


def _config(**prices: Any) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "models": {
                "astra": {"model": "gpt-6-astra"},  # the map prices its ultrafast tier
                "gpt": {"model": "gpt-5"},
                "pool": {"model": "q", "base_url": "http://gpu:8000/v1", "family": "vllm"},
                "pool-batch": {"model": "q", "base_url": "http://gpu:8001/v1", "family": "vllm"},
            },
            "prices": {"pool": {"input": 1, "output": 1, **prices}},
            "routing": {"pool": {"tiers": {"batch": {"alias": "pool-batch"}}}},
        }
    )


def _plan(config: GatewayConfig, model_map: Any, alias: str, tier: str) -> Any:
    facts = RequestFacts.from_headers(alias, {"x-speed-tier": tier})
    return plan_route(config, model_map, facts, {**BODY, "model": alias})


def test_ultrafast_where_the_map_prices_it(model_map: Any) -> None:
    decision = _plan(_config(), model_map, "astra", "ultrafast")
    assert decision.rejection is None and decision.tier == "ultrafast"
    assert decision.set_fields["service_tier"] == "ultrafast"
    refused = _plan(_config(), model_map, "gpt", "ultrafast")
    assert refused.rejection is not None and refused.rejection.field == "X-Speed-Tier"


def test_batch_needs_a_route_and_a_price(model_map: Any) -> None:
    unpriced = _plan(_config(), model_map, "pool", "batch")
    assert unpriced.rejection is not None
    assert "add prices.pool.tiers.batch" in unpriced.rejection.message
    assert unpriced.set_fields == {} and unpriced.headers == {}
    priced = _config(tiers={"batch": {"multiplier": "0.5"}})
    decision = _plan(priced, model_map, "pool", "batch")
    assert (decision.rejection, decision.tier, decision.alias) == (None, "batch", "pool-batch")
