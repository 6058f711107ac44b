"""Identity and entitlements of a virtual key, on real KeyRecords and the chat-product policy.

Pure: parse -> identify -> decide -> entitle -> apply_policy, as `handle_chat` runs them,
with no server. What the upstream and ledger then see is in tests/e2e/test_key_spoofing.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.auth.principal import OPEN, Principal
from gateway.config import load_config, parse_config
from gateway.errors import FareboxError, InvalidRequestError, PermissionDeniedError
from gateway.keys.model import KeyAttributes, KeyRecord
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.entitle import entitle
from gateway.pipeline.identify import identify
from gateway.pipeline.parse import parse
from gateway.pipeline.policy import apply_policy
from gateway.policy.decision import Decision
from gateway.policy.recovery import Target
from gateway.pricing import PriceBook

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config(ROOT / "policies" / "chat-product.yaml")
PRICES = PriceBook(CONFIG.prices)
HELLO = [{"role": "user", "content": "hi"}]


def key(role: str = "member", **attributes: Any) -> Principal:
    record = KeyRecord(
        id="key_alpha",
        prefix="fbx-alpha",
        secret_hash="0" * 64,
        attributes=KeyAttributes(role=role, **attributes),  # type: ignore[arg-type]
        created_at=datetime.now(UTC),
    )
    return Principal("key", record)


def planned(
    principal: Principal, body: dict[str, Any], config: Any = CONFIG, **headers: str
) -> tuple[RequestContext, Decision]:
    """The request as the upstream would get it, after the pipeline's pure stages."""
    ctx = RequestContext(raw_body=orjson.dumps(body), headers=headers, principal=principal)
    parse(ctx)
    identify(ctx)
    decide(ctx, config)
    entitle(ctx)
    decision = apply_policy(ctx, config, PriceBook(config.prices))
    return ctx, decision


def refused(principal: Principal, body: dict[str, Any], **headers: str) -> FareboxError:
    with pytest.raises(FareboxError) as caught:
        planned(principal, body, **headers)
    return caught.value


# --- identity ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-farebox-team", "billing"), ("x-farebox-project", "other"), ("x-plan", "pro")],
)
def test_member_key_may_not_name_another_identity(header: str, value: str) -> None:
    error = refused(key(team="growth", project="app", plan="free"), _chat(), **{header: value})
    assert isinstance(error, PermissionDeniedError) and error.status_code == 403
    assert (error.param, error.code) == (header, "identity_header_not_allowed")


def test_member_key_may_repeat_its_own_identity() -> None:
    headers = {"x-farebox-team": "growth", "x-farebox-project": "app", "x-plan": "free"}
    ctx, decision = planned(key(team="growth", project="app", plan="free"), _chat(), **headers)
    assert (ctx.identity.team, ctx.identity.project, ctx.identity.caller) == (
        "growth",
        "app",
        "key_alpha",
    )
    assert decision.rule == "free-plan"


def test_a_key_without_a_plan_may_not_pick_one() -> None:
    error = refused(key(team="growth"), _chat(), **{"x-plan": "pro"})
    assert (error.param, error.code) == ("x-plan", "identity_header_not_allowed")


def test_the_keys_plan_is_what_rules_see() -> None:
    ctx, decision = planned(key(team="growth", plan="pro"), _chat())
    assert decision.rule == "paid-plan" and ctx.headers["x-plan"] == "pro"
    _, decision = planned(key(team="growth"), _chat())
    assert decision.rule == "defaults"


def test_service_key_acts_for_others_with_its_own_values_as_defaults() -> None:
    service = key(role="service", team="platform", project="gateway", plan="free")
    ctx, decision = planned(service, _chat(), **{"x-farebox-team": "growth", "x-plan": "pro"})
    assert (ctx.identity.team, ctx.identity.project) == ("growth", "gateway")
    assert decision.rule == "paid-plan" and ctx.identity.caller == "key_alpha"
    ctx, decision = planned(service, _chat())
    assert (ctx.identity.team, decision.rule) == ("platform", "free-plan")


def test_open_mode_believes_the_headers() -> None:
    ctx, decision = planned(OPEN, _chat(), **{"x-farebox-team": "evals", "x-plan": "pro"})
    assert ctx.identity.team == "evals" and decision.rule == "evals-strict"
    assert ctx.identity.caller is None


def test_identity_headers_are_still_checked_with_a_key() -> None:
    error = refused(key(role="service"), _chat(), **{"x-farebox-team": "a\nb"})
    assert isinstance(error, InvalidRequestError) and error.param == "x-farebox-team"


# --- models -----------------------------------------------------------------------------


def test_models_are_glob_patterns_over_the_alias() -> None:
    principal = key(models=("sim-c*",))
    planned(principal, _chat("sim-chat"))
    planned(principal, _chat("sim-claude"))
    error = refused(principal, _chat("sim-thinker"))
    assert isinstance(error, PermissionDeniedError)
    assert (error.param, error.code) == ("model", "model_not_allowed")
    assert "sim-thinker" in error.message and "sim-c*" in error.message


# --- tiers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "headers", "param"),
    [
        ({}, {"x-speed-tier": "priority"}, "x-speed-tier"),
        ({"service_tier": "priority"}, {}, "service_tier"),
        ({"service_tier": "fast"}, {}, "service_tier"),  # OpenAI's newer name for priority
        ({"service_tier": "scale"}, {}, "service_tier"),
        ({"speed": "fast"}, {}, "speed"),
        ({"service_tier": "default"}, {"x-speed-tier": "flex"}, "x-speed-tier"),
    ],
)
def test_a_tier_outside_the_keys_tiers_is_refused(
    extra: dict[str, Any], headers: dict[str, str], param: str
) -> None:
    error = refused(key(tiers=("standard",)), _chat("sim-claude", **extra), **headers)
    assert isinstance(error, PermissionDeniedError) and error.status_code == 403
    assert (error.param, error.code) == (param, "tier_not_allowed")


def test_a_tier_inside_the_keys_tiers_is_served() -> None:
    _, decision = planned(
        key(plan="free", tiers=("standard", "priority")),
        _chat("sim-chat"),
        **{"x-speed-tier": "priority"},
    )
    assert decision.tier == "standard"  # the free plan forbids priority: the rule still holds
    _, decision = planned(
        key(tiers=("standard", "priority")), _chat("sim-chat"), **{"x-speed-tier": "priority"}
    )
    assert decision.tier == "priority"


def test_a_tier_the_policy_chooses_outside_the_keys_tiers_is_replanned_at_standard() -> None:
    # The paid-plan rule chooses priority; this key may only be billed at standard.
    ctx, decision = planned(key(plan="pro", tiers=("standard",)), _chat("sim-chat"))
    assert (decision.rule, decision.tier) == ("paid-plan", "standard")
    assert "service_tier" not in ctx.forwarded_body()  # vLLM: the pool is the tier
    _, unrestricted = planned(key(plan="pro"), _chat("sim-chat"))
    assert unrestricted.tier == "priority"


def test_auto_never_buys_priority_for_a_key_without_it() -> None:
    # Anthropic's (and OpenAI's) `auto`, or no service_tier at all, may be served at priority.
    for extra in ({}, {"service_tier": "auto"}):
        ctx, decision = planned(key(tiers=("standard",)), _chat("sim-claude", **extra))
        assert decision.tier == "standard"
        assert ctx.forwarded_body()["service_tier"] == "default"  # litellm: standard_only
    ctx, _ = planned(key(tiers=("standard", "priority")), _chat("sim-claude", service_tier="auto"))
    assert ctx.forwarded_body()["service_tier"] == "auto"


def test_a_model_offering_none_of_the_keys_tiers_is_refused() -> None:
    config = parse_config(
        "models:\n  m:\n    model: up\n    base_url: http://h/v1\n    family: vllm\n"
    )
    with pytest.raises(PermissionDeniedError) as caught:
        planned(key(tiers=("priority",)), _chat("m"), config=config)
    assert caught.value.code == "tier_not_allowed" and caught.value.param == "model"


def test_a_fallback_tier_outside_the_keys_tiers_is_replanned() -> None:
    ctx, _ = planned(key(tiers=("standard",)), _chat("sim-claude"))
    fallback = apply_policy(ctx, CONFIG, PRICES, target=Target("sim-chat", "priority"))
    assert fallback.tier == "standard"
    assert "service_tier" not in ctx.forwarded_body()


# --- output cap -------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_cap_above_the_keys_is_clamped(field: str) -> None:
    ctx, decision = planned(key(max_output_tokens=300), _chat("sim-chat", **{field: 100_000}))
    sent = ctx.forwarded_body()
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 300
    assert ctx.clamped and any(c.reason == "the key's max_output_tokens" for c in decision.clamps)


def test_an_absent_cap_is_the_keys() -> None:
    ctx, _ = planned(key(max_output_tokens=300), _chat("sim-chat", max_completion_tokens=None))
    sent = ctx.forwarded_body()
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 300


@pytest.mark.parametrize("value", ["100000", 100000.0, True])
def test_a_cap_that_is_not_an_integer_is_refused_before_entitle(value: Any) -> None:
    # An upstream may coerce it to a number the budget's worst case never held.
    error = refused(key(max_output_tokens=300), _chat("sim-chat", max_completion_tokens=value))
    assert isinstance(error, InvalidRequestError) and error.status_code == 400


def test_an_absent_cap_is_the_smaller_of_the_policys_and_the_keys() -> None:
    ctx, _ = planned(key(max_output_tokens=300), _chat("sim-chat"))
    assert ctx.forwarded_body()["max_tokens"] == 300  # the policy's default is 800
    ctx, _ = planned(key(max_output_tokens=5000), _chat("sim-chat"))
    assert ctx.forwarded_body()["max_tokens"] == 800  # the policy's default, not raised
    ctx, _ = planned(key(max_output_tokens=5000), _chat("sim-chat", max_tokens=9000))
    assert ctx.forwarded_body()["max_tokens"] == 2048  # the policy's ceiling
    ctx, _ = planned(key(max_output_tokens=300), _chat("sim-chat", max_tokens=100))
    assert ctx.forwarded_body()["max_tokens"] == 100  # a smaller ask is kept


def test_a_cap_without_any_policy_is_set() -> None:
    config = parse_config(
        "models:\n  m:\n    model: up\n    base_url: http://h/v1\n    family: openai\n"
    )
    ctx, _ = planned(key(max_output_tokens=64), _chat("m"), config=config)
    assert ctx.forwarded_body()["max_completion_tokens"] == 64


def test_thinking_is_fitted_under_the_keys_cap() -> None:
    # Anthropic needs 1024 <= budget_tokens < max_tokens: the policy fits it to the key's cap.
    ctx, _ = planned(
        key(plan="pro", max_output_tokens=3000), _chat("sim-claude"), **{"x-farebox-tags": "reason"}
    )
    sent = ctx.forwarded_body()
    assert sent["max_tokens"] == 3000 and sent["thinking"]["budget_tokens"] == 2999


# --- n ----------------------------------------------------------------------------------


def test_n_above_the_keys_limit_is_refused() -> None:
    planned(key(max_n=2), _chat("sim-chat", n=2))
    error = refused(key(max_n=2), _chat("sim-chat", n=3))
    assert isinstance(error, PermissionDeniedError)
    assert (error.param, error.code) == ("n", "n_not_allowed")
    error = refused(key(max_n=2), _chat("sim-chat", n="30"))
    assert isinstance(error, InvalidRequestError) and error.param == "n"


def test_open_mode_and_unlimited_keys_pass_unchanged() -> None:
    body = _chat("sim-chat", n=9, max_tokens=1000, service_tier="priority")
    for principal in (OPEN, key()):
        ctx, decision = planned(principal, body)
        assert decision.tier == "priority" and ctx.forwarded_body()["max_tokens"] == 1000


def _chat(model: str = "sim-chat", **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": HELLO, **fields}
