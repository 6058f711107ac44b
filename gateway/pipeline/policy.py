"""Stage 3b: apply the policy: output caps, effort and thinking, speed tier, fallbacks.

The policy engine (`gateway.policy`) is pure; this stage gathers its inputs (who is
calling, the step kind, the model's capabilities), turns its decision into body edits on
the context, and refuses the request when a strict rule says so.
"""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig
from gateway.errors import InvalidRequestError
from gateway.frozen import mutable_twin
from gateway.pipeline.context import RequestContext
from gateway.pipeline.entitle import within_key
from gateway.policy.decision import Decision
from gateway.policy.facts import STEP_KIND_HEADER, RequestFacts, lowered_headers
from gateway.policy.kept import kept_plan
from gateway.policy.recovery import Target
from gateway.pricing import PriceBook, UnknownModelError

STEP_KINDS = frozenset({"user_turn", "tool_result", "continuation"})
ENFORCEMENT_HEADER = "x-farebox-thinking-enforcement"


def capabilities(prices: PriceBook, config: GatewayConfig, alias: str) -> dict[str, Any]:
    """The price key's entry in litellm's map (cache minimums for the prefix check), if any.

    The policy does not use it: `plan_route` reads the upstream model's own entry.
    """
    key = config.price_key(alias)
    hit = _CAPABILITIES.get((id(prices), key))
    if hit is not None and hit[0] is prices:
        return hit[1]
    try:
        info = prices.model_info(key) or {}
    except UnknownModelError:
        info = {}
    if len(_CAPABILITIES) >= MAX_CAPABILITIES:  # price books replaced by many reloads
        _CAPABILITIES.clear()
    _CAPABILITIES[(id(prices), key)] = (prices, info)
    return info


_CAPABILITIES: dict[tuple[int, str], tuple[PriceBook, dict[str, Any]]] = {}
"""Map entries by price book and key: `model_info` deep-copies the entry (or raises for an
unpriced model) on every call, and a book never changes its map. Callers only read the
dict; the entry holds its book, so no id is reused while it lives."""
MAX_CAPABILITIES = 1024


# `RequestFacts(...)` with a store per field: its `__post_init__` only lowers headers that
# are not `LoweredHeaders` already, and `facts_of` passes `lowered_headers`' copy.
_FACTS = mutable_twin(RequestFacts, unchecked=True)


def facts_of(ctx: RequestContext, alias: str, task_effort: Any = None) -> RequestFacts:
    """What rules match on: caller, team, project, headers, tags, explicit step kind."""
    assert ctx.task is not None
    explicit = ctx.task.step if ctx.task.step in STEP_KINDS else None
    # What `RequestFacts.from_headers` and a `replace` of its team and project gave, built
    # once: names lower-cased (the last of two spellings wins), the explicit step added.
    headers = lowered_headers(ctx.headers)
    if explicit and STEP_KIND_HEADER not in ctx.headers:
        headers[STEP_KIND_HEADER] = explicit
    return _FACTS(
        alias=alias,
        caller=ctx.identity.caller,
        # Team and project as identify decoded them (UTF-8), the same the ledger books.
        team=ctx.identity.team,
        project=ctx.identity.project,
        headers=headers,
        step_kind=headers.get(STEP_KIND_HEADER) or None,
        task_effort=task_effort,
    )


def apply_policy(
    ctx: RequestContext,
    config: GatewayConfig,
    prices: PriceBook,
    task_effort: Any = None,
    target: Target | None = None,
) -> Decision:
    """Plan the request (or a fallback attempt at `target`) and record the edits.

    The plan is `plan_route`'s, the one `farebox policy explain` shows (kept by what it
    read: `gateway.policy.kept`).
    """
    assert ctx.alias is not None and ctx.task is not None
    alias = ctx.alias

    def plan_at(at: Target | None) -> Decision:
        facts = facts_of(ctx, alias, task_effort)
        return kept_plan(config, prices.model_map, facts, ctx.forwarded_body(), target=at)

    decision = within_key(ctx, plan_at(target), target, plan_at)  # the key's tiers and cap
    if decision.rejection is not None:
        raise InvalidRequestError(decision.rejection.message, param=decision.rejection.field)
    _record(ctx, config, decision)
    return decision


def _record(ctx: RequestContext, config: GatewayConfig, decision: Decision) -> None:
    assert ctx.task is not None
    for field in decision.remove:
        ctx.edits.set_fields.pop(field, None)
        ctx.edits.remove.add(field)
    for field, value in decision.set_fields.items():
        ctx.edits.remove.discard(field)
        ctx.edits.set_fields[field] = value
    route = config.models.get(decision.alias)
    if route is not None and decision.alias != ctx.alias:
        ctx.route = route  # a tier pool or fallback served by another alias
    if ctx.route is not None and ctx.body.get("model") != ctx.route.model:
        ctx.edits.set_fields["model"] = ctx.route.model
    ctx.task.step_kind = decision.step_kind
    ctx.tier_planned = decision.tier
    ctx.tier_requested = decision.tier_requested or decision.tier
    ctx.upstream_headers = dict(decision.headers)
    ctx.clamped = bool(decision.clamps)
    enforce = decision.thinking_enforcement == "stream"
    ctx.thinking_cap = decision.thinking_budget if enforce else None
    ctx.thinking_cap_closes = decision.closes_at_budget
    ctx.response_headers["x-farebox-rule"] = decision.rule
    if decision.thinking_enforcement is not None:
        ctx.response_headers[ENFORCEMENT_HEADER] = decision.thinking_enforcement
    else:
        ctx.response_headers.pop(ENFORCEMENT_HEADER, None)  # a fallback without a budget
