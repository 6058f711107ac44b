"""Stage 3a: what a virtual key may ask for: its models, tiers, output cap and `n`.

Pure: reads the key on `ctx.principal`, refuses with a 403 naming the field, or edits
the body. Open mode and keys without these attributes pass unchanged.

* `models`: glob patterns over the alias asked for; another model is refused
  (`model_not_allowed`). A fallback the configuration sends a request to is the
  operator's choice, not the client's, and is not checked against them.
* `tiers`: a tier asked for (`X-Speed-Tier`, body `service_tier` or `speed`) outside them
  is refused (`tier_not_allowed`). A tier the policy plans outside them (a rule's
  `choose`/`force`, a fallback step's tier) is re-planned at the key's first tier in
  the order standard, flex, priority, fast, ultrafast, batch; if the model offers none of
  the key's tiers, the request is refused. Where `auto` or an absent `service_tier` would
  let OpenAI or Anthropic serve priority capacity (and bill it) to a key without
  priority, `service_tier: default` is sent (Anthropic's `standard_only`).
* `max_output_tokens`: a client's `max_tokens`/`max_completion_tokens` above it (or not a
  plain integer) is lowered to it before the policy runs; a cap the policy plans above it
  (its default, thinking budget included) is re-planned with the key's cap as the
  client's ask, so the policy fits thinking under it. The smaller of the two wins.
* `max_n`: `n` above it, or not a plain integer, is refused (`n_not_allowed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Any

from gateway.auth.principal import Principal
from gateway.errors import InvalidRequestError, PermissionDeniedError
from gateway.keys.model import KeyAttributes
from gateway.pipeline.context import RequestContext
from gateway.policy.caps import MAX_COMPLETION_TOKENS, MAX_TOKENS
from gateway.policy.decision import Clamp, Decision
from gateway.policy.facts import RequestFacts
from gateway.policy.recovery import Target
from gateway.policy.schema import Tier
from gateway.policy.tiers import requested_tier

CAP_FIELDS = (MAX_TOKENS, MAX_COMPLETION_TOKENS)
TIER_PREFERENCE: tuple[Tier, ...] = ("standard", "flex", "priority", "fast", "ultrafast", "batch")
_AUTO_PRIORITY_FAMILIES = frozenset({"openai", "anthropic"})
"""Families whose `service_tier: auto` (or none) may be served, and billed, at priority."""

Replan = Callable[[Target | None], Decision]


def entitle(ctx: RequestContext) -> None:
    """Refuse a model, tier or `n` the key may not ask for; lower an output cap above its own."""
    key = ctx.principal.key
    if key is None:
        return
    attributes = key.attributes
    assert ctx.alias is not None
    check_model(attributes, ctx.alias)
    check_requested_tiers(attributes, ctx.headers, ctx.body)
    check_n(attributes, ctx.body)
    cap = attributes.max_output_tokens
    if cap is not None:
        for field in CAP_FIELDS:
            if field in ctx.body and _above(ctx.body[field], cap):
                ctx.edits.remove.discard(field)
                ctx.edits.set_fields[field] = cap


def may_use(principal: Principal, alias: str) -> bool:
    """Whether the caller's key (if any) allows the model alias `alias`."""
    patterns = principal.key.attributes.models if principal.key is not None else None
    return patterns is None or any(fnmatchcase(alias, pattern) for pattern in patterns)


def check_model(attributes: KeyAttributes, alias: str) -> None:
    """A 403 naming `model` unless one of the key's patterns matches `alias`."""
    patterns = attributes.models
    if patterns is None or any(fnmatchcase(alias, pattern) for pattern in patterns):
        return
    raise PermissionDeniedError(
        f"this key may not use model '{alias}' (allowed: {', '.join(patterns) or 'none'})",
        param="model",
        code="model_not_allowed",
    )


def check_requested_tiers(
    attributes: KeyAttributes, headers: Mapping[str, str], body: Mapping[str, Any]
) -> None:
    """A 403 naming the header or field that asks for a tier outside the key's tiers."""
    allowed = attributes.tiers
    if allowed is None:
        return
    asks = (
        ("x-speed-tier", RequestFacts("", headers=headers).tier_header),
        ("service_tier", _asked_in_body(body, "service_tier")),
        ("speed", _asked_in_body(body, "speed")),
    )
    for param, tier in asks:
        if tier is not None and tier not in allowed:
            raise PermissionDeniedError(
                f"this key may not use the {tier} tier (allowed: {', '.join(allowed) or 'none'})",
                param=param,
                code="tier_not_allowed",
            )


def _asked_in_body(body: Mapping[str, Any], field: str) -> str | None:
    """The tier one body field asks for, named as Farebox names tiers (`auto`: none)."""
    if body.get(field) is None:
        return None
    return requested_tier(RequestFacts(""), {field: body[field]})[0]


def check_n(attributes: KeyAttributes, body: Mapping[str, Any]) -> None:
    """Refuse an `n` above the key's `max_n` (403), or one that is not an integer (400)."""
    limit = attributes.max_n
    if limit is None or "n" not in body or body["n"] is None:
        return
    n = body["n"]
    if not _is_int(n):
        raise InvalidRequestError("n must be an integer", param="n", code="invalid_type")
    if n > limit:
        raise PermissionDeniedError(
            f"n {n} is over this key's limit of {limit} choices per request; send n <= {limit}",
            param="n",
            code="n_not_allowed",
        )


def within_key(
    ctx: RequestContext, decision: Decision, target: Target | None, replan: Replan
) -> Decision:
    """The policy's plan, re-planned where it would bill a tier or an output cap the key
    does not allow (see the module docstring); `replan` plans `ctx` again at a target."""
    key = ctx.principal.key
    if key is None or decision.rejected:
        return decision
    attributes = key.attributes
    alias = target.alias if target is not None else ctx.alias or decision.alias
    cap = attributes.max_output_tokens
    again, at = False, target
    if cap is not None and _above(decision.max_output_tokens, cap):
        ctx.edits.remove.discard(cap_field(decision))
        ctx.edits.set_fields[cap_field(decision)] = cap  # as if the client asked for the cap
        again = True
    if attributes.tiers is not None and decision.tier not in attributes.tiers:
        at, again = Target(alias, _tier_for(attributes)), True
    if again:
        decision = replan(at)
    if decision.rejected:
        return decision
    _check_planned_tier(attributes, decision)
    return _pin_standard(attributes, _with_clamps(ctx, decision, cap), ctx)


def cap_field(decision: Decision) -> str:
    """The field that carries the output cap: the one the policy wrote, else the family's."""
    for field in CAP_FIELDS:
        if field in decision.set_fields:
            return field
    return MAX_COMPLETION_TOKENS if decision.family == "openai" else MAX_TOKENS


def _tier_for(attributes: KeyAttributes) -> Tier:
    allowed = attributes.tiers or ()
    return next((tier for tier in TIER_PREFERENCE if tier in allowed), "standard")


def _check_planned_tier(attributes: KeyAttributes, decision: Decision) -> None:
    if attributes.tiers is None or decision.tier in attributes.tiers:
        return
    raise PermissionDeniedError(
        f"model '{decision.alias}' cannot be served at a tier this key may use "
        f"(allowed: {', '.join(attributes.tiers) or 'none'}; planned: {decision.tier})",
        param="model",
        code="tier_not_allowed",
    )


def _pin_standard(attributes: KeyAttributes, decision: Decision, ctx: RequestContext) -> Decision:
    """Send `service_tier: default` where `auto` (or none) could be served at priority."""
    allowed = attributes.tiers
    if allowed is None or "priority" in allowed or decision.tier != "standard":
        return decision
    if decision.family not in _AUTO_PRIORITY_FAMILIES:
        return decision
    sent = decision.apply(ctx.forwarded_body()).get("service_tier")
    if sent not in (None, "auto"):
        return decision
    fields = {**decision.set_fields, "service_tier": "default"}
    return replace(decision, set_fields=fields, remove=decision.remove - {"service_tier"})


def _with_clamps(ctx: RequestContext, decision: Decision, cap: int | None) -> Decision:
    """The plan with the client's caps the key lowered among its clamps (the ledger says so)."""
    if cap is None:
        return decision
    lowered = tuple(
        Clamp(field, ctx.body[field], cap, "the key's max_output_tokens")
        for field in CAP_FIELDS
        if field in ctx.body and _above(ctx.body[field], cap)
    )
    return replace(decision, clamps=decision.clamps + lowered) if lowered else decision


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _above(value: Any, cap: int) -> bool:
    """Whether a cap as sent exceeds `cap`: a larger integer, none at all, or not an integer."""
    return not _is_int(value) or value > cap
