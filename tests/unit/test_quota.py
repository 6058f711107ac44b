"""The pure parts of the quota stage: which limits apply, the output cap a request may use,
the engine's values built from a key's attributes or the configuration, refusals mapped."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from gateway.auth.principal import Principal
from gateway.config import GatewayConfig
from gateway.errors import (
    BudgetStateUnavailableError,
    InsufficientQuotaError,
    RateLimitExceededError,
)
from gateway.keys.model import KeyAttributes, KeyBudget, KeyRateLimit, KeyRecord
from gateway.pipeline.context import Identity, RequestContext
from gateway.pipeline.quota import UNCAPPED_OUTPUT_TOKENS, output_cap, refusal_error, scopes_for
from gateway.tenants import (
    Budget,
    BudgetExceeded,
    RateLimit,
    RateLimited,
    Scope,
    ScopeLimits,
    StateUnavailable,
)
from gateway.tenants.config import scope_limits

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _config(tenants: dict[str, object]) -> GatewayConfig:
    return GatewayConfig.model_validate({"tenants": tenants})


def _key(**attributes: object) -> KeyRecord:
    return KeyRecord(
        id="key_1",
        prefix="fbx-abc",
        secret_hash="0" * 64,
        attributes=KeyAttributes.model_validate(attributes),
        created_at=NOW,
    )


def test_the_output_cap_is_the_larger_cap_sent_else_the_model_maximum_else_the_default() -> None:
    assert output_cap({"max_tokens": 100, "max_completion_tokens": 300}, {}) == 300
    assert output_cap({"max_tokens": 100}, {"max_output_tokens": 64000}) == 100
    assert output_cap({"max_tokens": True}, {"max_output_tokens": 64000}) == 64000
    assert output_cap({}, {"max_tokens": 8192}) == 8192
    assert output_cap({}, {}) == UNCAPPED_OUTPUT_TOKENS


def test_a_key_budget_and_rate_limit_become_the_engines_values() -> None:
    budget = KeyBudget(daily_usd=Decimal(1), total_usd=Decimal(10), soft_ratio=None)
    rate = KeyRateLimit(requests_per_min=5, on_state_outage="fail_closed")
    limits = scope_limits(Scope("key", "key_1"), budget, rate)
    assert limits == ScopeLimits(
        Scope("key", "key_1"),
        (Budget("day", Decimal(1), None), Budget("total", Decimal(10), None)),
        RateLimit(requests_per_min=5, on_state_outage="fail_closed"),
    )
    assert scope_limits(Scope("key", "key_1"), KeyBudget(), KeyRateLimit()) is None


def test_the_scopes_are_the_keys_its_teams_and_its_projects() -> None:
    config = _config(
        {
            "teams": {"acme": {"budget": {"monthly_usd": 20}}},
            "projects": {"web": {"rate_limit": {"tokens_per_min": 1000}}},
        }
    )
    ctx = RequestContext(raw_body=b"{}", headers={})
    ctx.principal = Principal("key", _key(team="acme", budget={"daily_usd": "1"}))
    ctx.identity = Identity(caller="key_1", team="acme", project="web")
    found = scopes_for(ctx, config)
    assert [limits.scope for limits in found] == [
        Scope("key", "key_1"),
        Scope("team", "acme"),
        Scope("project", "web"),
    ]
    assert found[1].budgets == (Budget("month", Decimal(20)),)
    assert found[2].rate == RateLimit(tokens_per_min=1000)


def test_no_limit_anywhere_touches_no_counter() -> None:
    ctx = RequestContext(raw_body=b"{}", headers={})
    ctx.identity = Identity(team="unlisted", project=None)
    assert scopes_for(ctx, _config({"teams": {"acme": {}}})) == ()


def test_refusals_map_to_openai_shaped_errors() -> None:
    budget = BudgetExceeded(
        Scope("team", "acme"),
        "day",
        Decimal(1),
        Decimal("0.9"),
        Decimal("0.05"),
        Decimal("0.1"),
        datetime(2026, 12, 2, tzinfo=UTC),
    )
    error = refusal_error(budget)
    assert isinstance(error, InsufficientQuotaError) and error.status_code == 429
    assert error.body()["error"]["code"] == "insufficient_quota"
    assert error.body()["error"]["type"] == "insufficient_quota"
    limited = refusal_error(RateLimited(Scope("key", "k"), "tokens", Decimal(10), Decimal(5), 2.2))
    assert isinstance(limited, RateLimitExceededError)
    assert limited.body()["error"]["type"] == "tokens"
    assert limited.headers == {"Retry-After": "3"}
    away = refusal_error(StateUnavailable(Scope("team", "acme"), "day budget", "Redis away"))
    assert isinstance(away, BudgetStateUnavailableError) and away.status_code == 503
    assert away.headers == {"Retry-After": "5"}
