"""The policy schema: validation, error locations with line numbers, and the examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.policy import (
    POLICY_KEYS,
    FallbackStep,
    MaxTokens,
    Policy,
    PolicyError,
    RetrySettings,
    RuleActions,
    load_policy,
    parse_policy,
    validate_policy,
)
from gateway.policy.source import format_location

EXAMPLES = Path(__file__).resolve().parents[3] / "policies"


def test_empty_and_other_keys_are_fine() -> None:
    policy = validate_policy({"models": {"a": {"model": "x"}}, "prices": {}, "tasks": {}})
    assert policy == Policy()
    assert POLICY_KEYS == ("defaults", "rules", "routing")


def test_full_policy_validates() -> None:
    policy = validate_policy(
        {
            "defaults": {"max_tokens": {"default": 512, "ceiling": 4096}, "effort": "medium"},
            "rules": [
                {
                    "name": "tools",
                    "match": {"step": "tool_result", "team": ["a", "b*"], "headers": {"x": 2}},
                    "effort": "low",
                    "thinking_budget": 1024,
                    "tier": {"choose": "flex", "forbid": ["fast"]},
                }
            ],
            "routing": {"gpt": {"fallbacks": [{"statuses": [429, "503"], "tier": "standard"}]}},
        }
    )
    rule = policy.rules[0]
    assert rule.match.step == ["tool_result"]
    assert rule.match.headers == {"x": ["2"]}  # YAML numbers match as text
    assert policy.routing["gpt"].fallbacks[0].statuses == [429, 503]


@pytest.mark.parametrize(
    ("raw", "location", "message"),
    [
        ({"rules": [{"effort": "huge"}]}, "rules[0].effort", "Input should be"),
        ({"rules": [{"colour": 1}]}, "rules[0].colour", "Extra inputs"),
        ({"defaults": {"max_tokens": {"default": 9, "ceiling": 5}}}, "defaults.max_tokens", "over"),
        ({"defaults": {"thinking_budget": 0}}, "defaults.thinking_budget", "greater than"),
        ({"rules": [{"tier": {"force": "flex", "forbid": ["flex"]}}]}, "rules[0].tier", "forbid"),
        ({"rules": [{"name": "a"}, {"name": "a"}]}, "(top level)", "unique"),
        ({"routing": {"m": {"fallbacks": [{"statuses": [200]}]}}}, "routing.m.fallbacks[0]", ""),
        ({"routing": {"m": {"tiers": {"turbo": {}}}}}, "routing.m.tiers.turbo", ""),
    ],
)
def test_schema_errors_name_the_field(raw: dict, location: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        validate_policy(raw)
    rendered = [problem.location for problem in caught.value.problems]
    assert any(where.startswith(location) for where in rendered), rendered
    assert message in str(caught.value)


def test_locations_from_a_mapping_are_trimmed_to_the_data() -> None:
    with pytest.raises(PolicyError) as caught:
        validate_policy({"routing": {"m": {"retry": {"statuses": [429, "often"]}}}})
    (problem,) = caught.value.problems
    assert (problem.location, problem.line) == ("routing.m.retry.statuses[1]", None)
    assert str(caught.value).startswith("<policy>: routing.m.retry.statuses[1]: Input should be")


def test_forbidding_every_tier_is_refused() -> None:
    with pytest.raises(PolicyError, match="leave at least one"):
        validate_policy(
            {"defaults": {"tier": {"forbid": ["flex", "standard", "priority", "fast"]}}}
        )


def test_a_fallback_step_must_go_somewhere() -> None:
    with pytest.raises(PolicyError, match="needs `alias`, `tier`"):
        validate_policy({"routing": {"m": {"fallbacks": [{"statuses": [503]}]}}})


def test_errors_carry_file_and_line() -> None:
    text = (
        "models:\n"  # 1
        "  m: {model: x}\n"  # 2
        "defaults:\n"  # 3
        "  effort: medium\n"  # 4
        "rules:\n"  # 5
        "  - name: a\n"  # 6
        "    max_tokens:\n"  # 7
        "      ceiling: -3\n"  # 8
        "  - name: b\n"  # 9
        "    colour: red\n"  # 10
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("p.yaml:8: rules[0].max_tokens.ceiling: Input should be greater")
    assert lines[1].startswith("p.yaml:10: rules[1].colour: Extra inputs")


def test_missing_field_points_at_its_parent() -> None:
    text = "routing:\n  m:\n    fallbacks:\n      - tier: flex\n        alias: x\n        nope: 1\n"
    with pytest.raises(PolicyError, match=r"p.yaml:6: routing.m.fallbacks\[0\].nope"):
        parse_policy(text, "p.yaml")


def test_union_errors_are_merged_on_one_line() -> None:
    text = "routing:\n  m:\n    retry:\n      statuses: [429, sometimes]\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    (problem,) = caught.value.problems
    assert problem.line == 4
    assert problem.location == "routing.m.retry.statuses[1]"
    assert "integer" in problem.message and "connect" in problem.message


def test_unquoted_on_key_gets_a_helpful_message() -> None:
    text = "routing:\n  m:\n    fallbacks:\n      - {on: [429], tier: standard}\n"
    with pytest.raises(PolicyError, match=r"p.yaml:4: .*boolean.*statuses"):
        parse_policy(text, "p.yaml")


def test_invalid_yaml_and_top_level() -> None:
    with pytest.raises(PolicyError, match=r"p.yaml:2: \(file\): invalid YAML"):
        parse_policy("rules:\n  - a: b: c\n", "p.yaml")
    with pytest.raises(PolicyError, match="top level must be a mapping"):
        parse_policy("- 1\n", "p.yaml")


def test_routing_must_point_at_configured_models() -> None:
    text = (
        "models:\n"
        "  a: {model: x}\n"
        "routing:\n"
        "  a:\n"
        "    tiers:\n"
        "      fast: {alias: a-fast}\n"
        "    fallbacks:\n"
        "      - {alias: local, tier: standard}\n"
        "  zz*:\n"
        "    retry: {attempts: 1}\n"
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    found = {(p.location, p.line) for p in caught.value.problems}
    assert ("routing.a.tiers.fast.alias", 6) in found
    assert ("routing.a.fallbacks[0].alias", 8) in found
    assert ("routing.zz*", 9) in found


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")


def test_format_location() -> None:
    assert format_location(("rules", 0, "match", "tags", 2)) == "rules[0].match.tags[2]"
    assert format_location(()) == "(top level)"


def test_rule_fields_fall_back_to_defaults_one_level_deep() -> None:
    defaults = RuleActions(max_tokens=MaxTokens(default=512, ceiling=4096), effort="high")
    rule = RuleActions.model_validate({"max_tokens": {"default": 256}, "thinking_budget": 99})
    merged = rule.over(defaults)
    assert merged.max_tokens == MaxTokens(default=256, ceiling=4096)
    assert merged.effort == "high"
    assert merged.thinking_budget == 99


def test_explicit_null_clears_a_default() -> None:
    defaults = RuleActions(thinking_budget=2048, effort="low")
    merged = RuleActions.model_validate({"thinking_budget": None}).over(defaults)
    assert merged.thinking_budget is None
    assert merged.effort == "low"


def test_route_lookup_exact_then_glob_then_default() -> None:
    policy = validate_policy(
        {
            "routing": {
                "gpt-*": {"retry": {"attempts": 1}},
                "gpt-5": {"retry": {"attempts": 3}},
            }
        }
    )
    assert policy.route("gpt-5").retry.attempts == 3
    assert policy.route("gpt-4o").retry.attempts == 1
    assert policy.route("claude").retry == RetrySettings()


def test_default_statuses() -> None:
    assert 429 in FallbackStep(tier="standard").statuses
    assert "circuit_open" in FallbackStep(tier="standard").statuses
    assert "circuit_open" not in RetrySettings().statuses


@pytest.mark.parametrize("name", ["chat-product", "coding-agent", "overnight-batch"])
def test_example_policies_load_and_run_on_the_simulator(name: str) -> None:
    policy, raw = load_policy(EXAMPLES / f"{name}.yaml")
    assert policy.rules, "each example shows rules"
    # The rest of the file is the gateway's own configuration and must validate too.
    config = GatewayConfig.model_validate({k: v for k, v in raw.items() if k not in POLICY_KEYS})
    assert config.models and all(route.uses_simulator for route in config.models.values())
    assert set(policy.routing) <= set(config.models)
