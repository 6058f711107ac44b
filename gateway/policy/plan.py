"""`plan`: everything the policy decides for one request, in one pure call.

    step kind -> first matching rule (over defaults) -> effort and thinking budget
    -> output cap (thinking counted where the backend counts it) -> thinking fields
    -> speed tier and the alias that serves it -> fallbacks, retries, breaker, timeouts

The edits are top-level `set_fields` / `remove` for the raw-body patcher; nested objects
(`chat_template_kwargs`, `thinking`) are computed whole. When the served alias differs
from the one asked for (a tier pool, a fallback), the caller also rewrites `model` to
that alias's upstream name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway.policy.backends import merged_capabilities, thinking_enforcement
from gateway.policy.caps import plan_output_cap
from gateway.policy.decision import Decision, Draft
from gateway.policy.dialects import write_thinking
from gateway.policy.facts import RequestFacts
from gateway.policy.match import select_rule
from gateway.policy.recovery import Target
from gateway.policy.schema import Effort, Family, Policy, RouteSettings, RuleActions, Tier
from gateway.policy.steps import infer_step_kind
from gateway.policy.stream import needs_stream_enforcement
from gateway.policy.thinking import counted_tokens, resolve_thinking, shape_thinking
from gateway.policy.tiers import choose_tier, offered_tiers, requested_tier, write_tier


@dataclass(slots=True)  # private, never changed: not frozen, which costs a call per field
class _Inputs:
    """What every stage reads: the request, the backend, and the rule in force."""

    facts: RequestFacts
    family: Family
    caps: Mapping[str, Any]
    actions: RuleActions
    label: str
    route: RouteSettings
    target: Target | None


@dataclass(slots=True)
class _Served:
    tier: Tier
    alias: str
    asked: str | None


@dataclass(frozen=True, slots=True)
class _RouteView:
    """What a route's settings and map entry give every request alike."""

    route: RouteSettings
    caps: Mapping[str, Any]
    notes: tuple[str, ...]
    offered: tuple[Tier, ...]


def _route_view(
    policy: Policy, alias: str, family: Family, capabilities: Mapping[str, Any]
) -> _RouteView:
    """The alias's routing, merged capabilities and tiers, kept per policy and map entry.

    Kept only for a read-only entry (the planner's, `route_capabilities`): a plain dict
    could change between calls. Each entry holds its policy and map entry, so a reloaded
    policy (a new object) never reads an old one's view and no id is reused while it lives.
    """
    cacheable = isinstance(capabilities, MappingProxyType)
    key = (id(policy), alias, family, id(capabilities))
    hit = _VIEWS.get(key) if cacheable else None
    if hit is not None and hit[0] is policy and hit[1] is capabilities:
        return hit[2]
    route = policy.route(alias)
    notes: list[str] = []
    caps = merged_capabilities(family, capabilities, route.capabilities, notes)
    view = _RouteView(route, caps, tuple(notes), offered_tiers(family, route, caps))
    if cacheable:
        if len(_VIEWS) >= MAX_VIEWS:  # policies replaced by many reloads
            _VIEWS.clear()
        _VIEWS[key] = (policy, capabilities, view)
    return view


_VIEWS: dict[tuple[int, str, str, int], tuple[Policy, Mapping[str, Any], _RouteView]] = {}
MAX_VIEWS = 1024


def _serve(draft: Draft, given: _Inputs, offered: tuple[Tier, ...]) -> _Served:
    """Choose the tier, write its parameters, and name the alias that serves it."""
    asked, field = requested_tier(given.facts, draft.body)
    target, label = given.target, given.label
    if target is not None:
        # A fallback names its tier; the rule and the client were heard on the first try.
        tier, explicit = choose_tier(draft, target.tier, None, offered, strict=False, label=label)
    else:
        strict, rule = bool(given.actions.strict), given.actions.tier
        tier, explicit = choose_tier(
            draft, asked, rule, offered, strict=strict, label=label, field=field
        )
    alias = target.alias if target is not None else given.facts.alias
    if explicit:
        alias = write_tier(draft, given.family, given.route, tier, given.facts, alias)
    return _Served(tier, alias, asked)


def _decision(
    draft: Draft, given: _Inputs, step: str, effort: Effort | None, budget: int | None,
    limit: int | None, served: _Served, held: int | None,
) -> Decision:  # fmt: skip
    """Freeze the draft; a rejected request carries no edits, clamps or notes."""
    rejected = draft.rejection is not None
    supports_budget = bool(given.caps.get("supports_thinking_budget"))
    streamed = draft.body.get("stream") is True
    cut = given.route.thinking_overrun == "cut"
    enforcement = thinking_enforcement(given.family, given.caps, held, streamed=streamed, cut=cut)
    return Decision(
        rule=given.label,
        step_kind=step,
        family=given.family,
        alias=served.alias,
        tier=served.tier,
        tier_requested=served.asked,
        set_fields={} if rejected else dict(draft.set_fields),
        remove=frozenset() if rejected else frozenset(draft.remove),
        headers={} if rejected else dict(draft.headers),
        effort=effort,
        pin_effort=bool(given.actions.pin_effort_per_task),
        thinking_budget=budget,
        max_output_tokens=limit,
        stream_enforcement=budget is not None
        and needs_stream_enforcement(given.family, supports_budget),
        can_continue=bool(given.caps.get("supports_continue_final_message")),
        clamps=() if rejected else tuple(draft.clamps),
        notes=() if rejected else tuple(draft.notes),
        fallbacks=tuple(given.route.fallbacks),
        retry=given.route.retry,
        breaker=given.route.breaker,
        timeouts=given.route.timeouts,
        rejection=draft.rejection,
        thinking_enforcement=None if rejected else enforcement,
    )


def plan(
    policy: Policy,
    facts: RequestFacts,
    body: Mapping[str, Any],
    family: Family,
    capabilities: Mapping[str, Any] | None = None,
    *,
    target: Target | None = None,
) -> Decision:
    """Decide edits, headers, tier, caps and recovery for one request; never raises on policy.

    `capabilities` is the model's litellm map entry (`supports_reasoning`,
    `supports_adaptive_thinking`, ...); `routing.<alias>.capabilities` overrides it. With
    `target`, plan a fallback attempt: that alias's routing, at that tier, with `family`
    and `capabilities` being the target's.
    """
    draft = Draft(body)
    step = infer_step_kind(body, facts.step_kind)
    label, actions = select_rule(policy, facts, step)
    alias = target.alias if target is not None else facts.alias
    view = _route_view(policy, alias, family, {} if capabilities is None else capabilities)
    draft.notes.extend(view.notes)
    route, caps = view.route, view.caps
    given = _Inputs(facts, family, caps, actions, label, route, target)
    resolved = resolve_thinking(draft, actions, facts, family, label)
    thinking = shape_thinking(draft, family, caps, resolved)
    counted = counted_tokens(family, thinking)
    strict = bool(actions.strict)
    limit = plan_output_cap(
        draft, family, caps, actions.max_tokens, counted, strict=strict, rule=label
    )
    budget = write_thinking(draft, family, caps, thinking, limit)
    if thinking.off:
        budget = None
    # OpenAI-style backends carry a rule's budget as an effort only: a hint, said as one.
    effort_only = family in ("openai", "other") and resolved.source == "rule" and not thinking.off
    held = resolved.budget if budget is None and effort_only else budget
    served = _serve(draft, given, view.offered)
    return _decision(draft, given, step, resolved.effort, budget, limit, served, held)
