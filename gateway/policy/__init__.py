"""Policy: output caps, effort and thinking caps, speed tiers, fallbacks, as reviewed YAML.

Pure logic, no I/O and no awaits (`cli` and `source` read files for the commands only).
The modules, in the order a request meets them:

    schema     the `defaults:`, `rules:` and `routing:` keys (pydantic, extra="forbid")
    source     read those keys from a config file, errors with file and line
    facts      who is asking, for which alias, with which headers and tags
    steps      user_turn, tool_result or continuation, explicit or from the body
    match      the first matching rule wins, over the defaults
    backends   what each backend family accepts, and who holds a thinking budget
    effort     effort levels, per-backend support, budgets, pinning per task
    thinking   the effort and thinking budget in force (caps, clamps, strict)
    caps       the output cap in the field the backend reads, thinking counted
    dialects   thinking written as each backend's fields
    tiers      flex, standard, priority, fast: which alias, which fields and headers
    plan       all of the above in one call: `plan(...) -> Decision`
    planner    `plan_route`: one plan from the configuration, for explain and the gateway
    recovery   retries with jittered backoff and fallback chains after a failure
    breaker    a circuit breaker per upstream, on an injected clock
    stream     thinking budgets enforced on the stream: `continuation_request`
    explain    a decision as JSON or in the terminal; `cli` holds the commands
"""

from __future__ import annotations

from gateway.policy.breaker import BreakerBoard, BreakerState, CircuitBreaker
from gateway.policy.caps import output_field
from gateway.policy.decision import Clamp, Decision, Rejection
from gateway.policy.effort import (
    EFFORT_BUDGETS,
    budget_for_effort,
    effort_for_budget,
    nearest_supported,
    pinned_effort,
    supported_efforts,
)
from gateway.policy.explain import explain, render_decision
from gateway.policy.facts import SERVED_TIER_HEADER, RequestFacts, parse_tags
from gateway.policy.match import rule_matches, select_rule
from gateway.policy.plan import plan
from gateway.policy.recovery import (
    Attempt,
    RandomSource,
    Recovery,
    Retrier,
    Status,
    Target,
    next_fallback,
    recover,
)
from gateway.policy.schema import (
    EFFORTS,
    POLICY_KEYS,
    TIERS,
    BreakerSettings,
    Effort,
    FallbackStep,
    Family,
    Match,
    MaxTokens,
    Policy,
    PolicySection,
    RetrySettings,
    RouteSettings,
    Rule,
    RuleActions,
    Tier,
    TierRule,
    TierTarget,
    Timeouts,
)
from gateway.policy.source import PolicyError, Problem, load_policy, parse_policy, validate_policy
from gateway.policy.steps import CONTINUATION, TOOL_RESULT, UNKNOWN, USER_TURN, infer_step_kind
from gateway.policy.stream import continuation_request, needs_stream_enforcement
from gateway.policy.tiers import ANTHROPIC_FAST_BETA

__all__ = [
    "ANTHROPIC_FAST_BETA",
    "CONTINUATION",
    "EFFORTS",
    "EFFORT_BUDGETS",
    "POLICY_KEYS",
    "SERVED_TIER_HEADER",
    "TIERS",
    "TOOL_RESULT",
    "UNKNOWN",
    "USER_TURN",
    "Attempt",
    "BreakerBoard",
    "BreakerSettings",
    "BreakerState",
    "CircuitBreaker",
    "Clamp",
    "Decision",
    "Effort",
    "FallbackStep",
    "Family",
    "Match",
    "MaxTokens",
    "Policy",
    "PolicyError",
    "PolicySection",
    "Problem",
    "RandomSource",
    "Recovery",
    "Rejection",
    "RequestFacts",
    "Retrier",
    "RetrySettings",
    "RouteSettings",
    "Rule",
    "RuleActions",
    "Status",
    "Target",
    "Tier",
    "TierRule",
    "TierTarget",
    "Timeouts",
    "budget_for_effort",
    "continuation_request",
    "effort_for_budget",
    "explain",
    "infer_step_kind",
    "load_policy",
    "nearest_supported",
    "needs_stream_enforcement",
    "next_fallback",
    "output_field",
    "parse_policy",
    "parse_tags",
    "pinned_effort",
    "plan",
    "recover",
    "render_decision",
    "rule_matches",
    "select_rule",
    "supported_efforts",
    "validate_policy",
]
