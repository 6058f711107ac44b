"""Speed tiers: which one a request is served at, from which alias, with which parameters.

A client asks with `X-Speed-Tier` (or OpenAI's `service_tier`, Anthropic's `speed`); a
rule may force, forbid or choose one. Natively, OpenAI offers flex and priority through
`service_tier`, Anthropic priority through `service_tier` and fast mode through
`speed: "fast"` with a beta header, and OpenAI ultrafast (`service_tier: "ultrafast"`) on
the models whose map entry prices it. Anything else is a `routing.<alias>.tiers` entry:
body fields, headers, or another alias (a faster or cheaper pool of the same model). Batch
has no synchronous wire form: it is served where a `routing.<alias>.tiers.batch` entry
says how (a batch pool), and refused with a 400 elsewhere, as ultrafast is.

The client's own tier fields (`service_tier`, `speed`) obey the policy like the header:
a tier the rule forbids is not forwarded as sent. Strict rules refuse it (400 naming the
field); others serve what the rule allows and rewrite the field to say so, and the
response and ledger keep both the tier asked for and the tier served.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.decision import Draft
from gateway.policy.facts import RequestFacts
from gateway.policy.schema import TIERS, Family, RouteSettings, Tier, TierRule

ANTHROPIC_FAST_BETA = "fast-mode-2026-02-01"
"""The `anthropic-beta` value that goes with `speed: "fast"`."""

NATIVE_TIERS: Mapping[Family, tuple[Tier, ...]] = {
    "openai": ("flex", "standard", "priority"),
    "anthropic": ("standard", "priority", "fast"),
    "vllm": ("standard",),
    "sglang": ("standard",),
    "other": ("standard",),
}

_BODY_TIERS: Mapping[str, Tier | None] = {
    "auto": None,  # the account's default: no ask
    "default": "standard",
    "standard_only": "standard",
    "flex": "flex",
    "priority": "priority",
    "scale": "priority",  # OpenAI's legacy Scale Tier: reserved, priority-priced capacity
    "fast": "priority",  # OpenAI's newer name for priority processing
    "ultrafast": "ultrafast",
}
_SPEEDS: Mapping[str, Tier] = {"fast": "fast", "standard": "standard"}
_REFUSED_UNOFFERED: frozenset[Tier] = frozenset({"batch", "ultrafast"})
"""Tiers that change what is bought (asynchronous, or several times the price): a client
asking for one where it is not offered is refused, not quietly served at standard."""
_CLIENT_FIELDS = ("service_tier", "speed")
_PREFERENCE: tuple[Tier, ...] = ("standard", "flex", "priority", "fast")


def requested_tier(facts: RequestFacts, body: Mapping[str, Any]) -> tuple[str | None, str]:
    """The tier the client asked for and where: X-Speed-Tier, service_tier, or speed.

    A value that names no tier comes back as sent, so that it is refused or reported.
    """
    if facts.tier_header:
        return facts.tier_header, "X-Speed-Tier"
    service_tier = body.get("service_tier")
    if service_tier is not None:
        name = service_tier.lower() if isinstance(service_tier, str) else str(service_tier)
        return _BODY_TIERS.get(name, name), "service_tier"
    speed = body.get("speed")
    if speed is None:
        return None, "speed"
    return _SPEEDS.get(speed, str(speed)) if isinstance(speed, str) else str(speed), "speed"


def _map_prices(capabilities: Mapping[str, Any], tier: str) -> bool:
    """Whether litellm's entry for the model publishes prices for `tier` (`*_ultrafast`)."""
    return any(key.endswith(f"_{tier}") for key in capabilities)


def _fast_mode(capabilities: Mapping[str, Any]) -> bool:
    """Whether an Anthropic model has fast mode: its map entry (or route) says so.

    litellm's map marks the fast-capable models `supports_speed: true` and says nothing of
    the others (Anthropic refuses `speed` there); a model the map does not know at all
    gets the benefit of the doubt, and its reply says whether fast mode ran.
    """
    said = capabilities.get("supports_speed")
    if said is not None:
        return bool(said)
    return "litellm_provider" not in capabilities


def offered_tiers(
    family: Family, route: RouteSettings, capabilities: Mapping[str, Any]
) -> tuple[Tier, ...]:
    """The tiers an alias serves: the family's native ones and configured ones, less withdrawn."""
    native = set(NATIVE_TIERS[family])
    if family == "anthropic" and not _fast_mode(capabilities):
        native.discard("fast")
    if family == "openai" and _map_prices(capabilities, "ultrafast"):
        native.add("ultrafast")
    configured = {tier for tier, target in route.tiers.items() if target.enabled}
    withdrawn = {tier for tier, target in route.tiers.items() if not target.enabled}
    return tuple(tier for tier in TIERS if tier in (native | configured) - withdrawn)


def _asked(
    draft: Draft, asked: str | None, rule: TierRule, strict: bool, label: str, field: str
) -> Tier | None:
    """The client's tier if it is a known tier the rule allows."""
    if asked is None:
        return None
    if asked not in TIERS:
        message = f"unknown speed tier '{asked}' (use one of {', '.join(TIERS)})"
        if strict:
            draft.reject(field, message)
        draft.notes.append(message + "; ignored")
        return None
    tier: Tier = TIERS[TIERS.index(asked)]
    if tier in rule.forbid:
        message = f"speed tier '{tier}' is forbidden by rule '{label}'"
        if strict:
            allowed = ", ".join(t for t in TIERS if t not in rule.forbid)
            draft.reject(field, f"{message}; ask for one of {allowed}")
        draft.notes.append(message + "; ignored")
        return None
    return tier


def choose_tier(
    draft: Draft,
    asked: str | None,
    rule: TierRule | None,
    offered: tuple[Tier, ...],
    *,
    strict: bool,
    label: str,
    field: str = "X-Speed-Tier",
) -> tuple[Tier, bool]:
    """Return the tier to serve and whether it was asked or chosen (False: implicit standard)."""
    rule = rule or _NO_TIER_RULE
    if rule.force is not None:
        if asked is not None and asked != rule.force:
            draft.notes.append(f"speed tier forced to {rule.force} by rule '{label}'")
        tier: Tier | None = rule.force
    else:
        tier = _asked(draft, asked, rule, strict, label, field) or rule.choose
    if tier is None:
        return "standard", not _keeps_client_fields(draft, rule)
    if tier not in offered and tier in _REFUSED_UNOFFERED and asked == tier:
        offers = ", ".join(offered)
        draft.reject(field, f"this model does not offer the {tier} tier (offered: {offers})")
    if tier not in offered:
        tier = _fallback(draft, tier, rule, offered)
    return tier, True


_NO_TIER_RULE = TierRule()
"""Frozen: one shared rule for the rules without `tier:`, not a validated model per request."""


def _fallback(draft: Draft, tier: Tier, rule: TierRule, offered: tuple[Tier, ...]) -> Tier:
    """The tier served in place of one the model does not offer, noted."""
    allowed = [t for t in _PREFERENCE if t in offered and t not in rule.forbid]
    fallback = allowed[0] if allowed else "standard"
    draft.notes.append(f"this model does not offer the {tier} tier; serving {fallback}")
    return fallback


def _keeps_client_fields(draft: Draft, rule: TierRule) -> bool:
    """Whether the body's own tier fields may pass as sent: none, or `service_tier: auto`
    where the rule forbids nothing `auto` could pick (a project's default may be priority)."""
    if "speed" in draft.body:
        return False
    value = draft.body.get("service_tier")
    return value is None or (value == "auto" and not {"priority", "flex"} & set(rule.forbid))


def _merge_beta(draft: Draft, headers: Mapping[str, str], value: str) -> None:
    present = [v.strip() for v in headers.get("anthropic-beta", "").split(",") if v.strip()]
    if value not in present:
        present.append(value)
    draft.headers["anthropic-beta"] = ",".join(present)


def _native(draft: Draft, family: Family, tier: Tier, facts: RequestFacts) -> None:
    """Write the family's own parameters for a tier (and drop client fields it has no use for)."""
    if family != "anthropic":
        draft.drop("speed")  # Anthropic's field; other APIs refuse or ignore it
    if family == "openai":
        if tier in ("flex", "priority", "ultrafast"):
            draft.set("service_tier", tier)
        elif draft.body.get("service_tier") not in (None, "default"):
            draft.set("service_tier", "default")
    elif family in ("vllm", "sglang", "other"):
        draft.drop("service_tier")  # the pool's configuration is the tier
    elif family == "anthropic":
        if tier == "fast":
            draft.set("speed", "fast")
            _merge_beta(draft, facts.headers, ANTHROPIC_FAST_BETA)
            return
        if draft.body.get("speed") is not None:
            draft.drop("speed")
        # Through litellm: "auto" may use priority capacity, "default" is standard_only.
        draft.set("service_tier", "auto" if tier == "priority" else "default")


def write_tier(
    draft: Draft, family: Family, route: RouteSettings, tier: Tier, facts: RequestFacts, alias: str
) -> str:
    """Write the tier's body fields and headers; return the alias that serves it.

    Fields another tier of this alias sets belong to the tier decision: a body that carries
    one (say `service_tier: flex`) loses it when a tier without it is served.
    """
    target = route.tiers.get(tier)
    for other in route.tiers.values():
        for key in other.set:
            draft.drop(key)  # set again below when this tier sends it too
    if target is None or target.alias is None:
        _native(draft, family, tier, facts)
    for key, value in (target.set if target else {}).items():
        draft.set(key, value)
    draft.headers.update(target.headers if target else {})
    return target.alias if target is not None and target.alias else alias
