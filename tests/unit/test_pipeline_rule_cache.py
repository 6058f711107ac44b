"""The route's cache rule, kept per family and price-map entry, is the one built afresh."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ModelRoute
from gateway.pipeline import prefix
from gateway.pipeline.context import RequestContext
from gateway.prefix.cache_rules import rule_from_model_info

INFOS: list[dict[str, Any]] = [
    {},
    {"prompt_cache_min_tokens": 2048},
    {"prompt_cache_min_tokens": 0, "supports_prompt_cache_breakpoint": True},
    {"supports_prompt_cache_breakpoint": True, "prompt_cache_min_tokens": 1.5},
    {"prompt_cache_min_tokens": "many"},
]
ROUTES = [
    ModelRoute(provider="openai", model="m", base_url="http://127.0.0.1:1/v1", family="openai"),
    ModelRoute(provider="openai", model="m", base_url="http://127.0.0.1:1/v1", family="vllm"),
    ModelRoute(provider="openai", model="m", base_url="http://127.0.0.1:1/v1", family="sglang"),
    ModelRoute(provider="anthropic", model="claude"),
]


def _ctx(route: ModelRoute) -> RequestContext:
    ctx = RequestContext(raw_body=b"{}", headers={}, request_id="r")
    ctx.route = route
    return ctx


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.wire_family)
@pytest.mark.parametrize("info", INFOS, ids=str)
def test_the_kept_rule_is_the_built_one(route: ModelRoute, info: dict[str, Any]) -> None:
    family = prefix.cache_family(route.wire_family)
    first = prefix.rule_for_route(_ctx(route), info)
    assert first == rule_from_model_info(family, info)
    assert prefix.rule_for_route(_ctx(route), info) is first  # kept, not rebuilt


def test_another_entry_gets_its_own_rule() -> None:
    route = ROUTES[0]
    small = prefix.rule_for_route(_ctx(route), {"prompt_cache_min_tokens": 64})
    large = prefix.rule_for_route(_ctx(route), {"prompt_cache_min_tokens": 4096})
    assert (small.min_tokens, large.min_tokens) == (64, 4096)


def test_the_kept_rules_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix, "MAX_RULES", 3)
    monkeypatch.setattr(prefix, "_RULES", {})
    infos = [{"prompt_cache_min_tokens": n} for n in range(1000, 1007)]
    for info in infos:
        rule = prefix.rule_for_route(_ctx(ROUTES[0]), info)
        assert rule == rule_from_model_info("openai", info)
        assert len(prefix._RULES) <= 3
