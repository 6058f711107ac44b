"""`select_rule` keeps a rule's actions over the defaults per rule and defaults: the same
actions as merging them on every call, and a new policy (a reload) gets its own merge."""

from __future__ import annotations

from gateway.policy import RequestFacts
from gateway.policy.match import select_rule
from gateway.policy.schema import Policy

POLICY = {
    "defaults": {"max_tokens": {"default": 1024, "ceiling": 4096}, "effort": "low"},
    "rules": [
        {"name": "tools", "match": {"step": "tool_result"}, "max_tokens": {"default": 512}},
        {"match": {"step": "user_turn", "tags": ["Batch"]}, "effort": "high"},
        {"name": "users", "match": {"step": "user_turn"}, "max_tokens": {"default": 900}},
    ],
}


def test_a_matching_rule_gives_its_merge_with_the_defaults_every_call() -> None:
    policy = Policy.model_validate(POLICY)
    facts = RequestFacts(alias="m")
    label, actions = select_rule(policy, facts, "user_turn")
    assert label == "users"
    assert actions == policy.rules[2].over(policy.defaults)
    assert actions.max_tokens is not None
    assert (actions.max_tokens.default, actions.max_tokens.ceiling) == (900, 4096)
    assert actions.effort == "low"
    assert select_rule(policy, facts, "user_turn") == (label, actions)
    assert select_rule(policy, facts, "unknown") == ("defaults", policy.defaults)


def test_tags_still_decide_and_each_rule_keeps_its_own_merge() -> None:
    policy = Policy.model_validate(POLICY)
    tagged = RequestFacts(alias="m", headers={"X-Farebox-Tags": "batch, other"})
    label, actions = select_rule(policy, tagged, "user_turn")
    assert (label, actions.effort) == ("rules[1]", "high")
    assert actions.max_tokens is not None and actions.max_tokens.default == 1024
    label, actions = select_rule(policy, tagged, "tool_result")
    assert (label, actions.effort) == ("tools", "low")
    assert actions.max_tokens is not None and actions.max_tokens.default == 512


def test_a_reloaded_policy_is_merged_afresh() -> None:
    facts = RequestFacts(alias="m")
    before = Policy.model_validate(POLICY)
    assert select_rule(before, facts, "user_turn")[1].max_tokens.default == 900  # type: ignore[union-attr]
    changed = {**POLICY, "defaults": {"max_tokens": {"default": 1024, "ceiling": 2048}}}
    rules = [*POLICY["rules"][:2], {**POLICY["rules"][2], "max_tokens": {"default": 700}}]  # type: ignore[index]
    after = Policy.model_validate({**changed, "rules": rules})
    label, actions = select_rule(after, facts, "user_turn")
    assert label == "users"
    assert actions.max_tokens is not None
    assert (actions.max_tokens.default, actions.max_tokens.ceiling) == (700, 2048)
    assert select_rule(before, facts, "user_turn")[1].max_tokens.ceiling == 4096  # type: ignore[union-attr]
