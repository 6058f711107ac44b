"""One planner for `farebox policy explain` and the live path: same inputs, same plan.

Both call `plan_route` with the configuration and litellm's model map (the price book's),
so a route's family, its capabilities and the upstream model name are found the same way:

- the family is the route's `wire_family`;
- capabilities are the upstream model's own map entry, looked up by the name litellm uses
  (`anthropic/claude-...` for a litellm route, the bare model for an OpenAI-compatible
  one), with `routing.<alias>.capabilities` over it. Prices still come from the price key;
  a model billed like another (`prices: {alias: {base: ...}}`) does not borrow that
  model's capabilities, since litellm does not either;
- the served alias's upstream model name replaces the client's `model`;
- a stream asks the upstream for its usage chunk (`stream_options.include_usage`), which
  the gateway needs to meter it (the relay hides the chunk from a client that did not ask).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from gateway.config import GatewayConfig, ModelRoute
from gateway.policy.backends import upstream_map_name
from gateway.policy.decision import Decision
from gateway.policy.facts import RequestFacts
from gateway.policy.plan import plan
from gateway.policy.recovery import Target
from gateway.policy.tier_prices import refuse_unpriced
from gateway.pricing import catalog


def route_capabilities(route: ModelRoute, model_map: Mapping[str, Any]) -> Mapping[str, Any]:
    """The upstream model's entry in litellm's map, found as litellm finds it; {} if none.

    Read-only and kept per map and model: a map never changes once its price book is built,
    and `plan` keeps what it derives from a read-only entry (the merged capabilities, the
    tiers offered) by its identity.
    """
    name = upstream_map_name(route.provider, route.model)
    hit = _ENTRIES.get((id(model_map), name))
    if hit is not None and hit[0] is model_map:
        return hit[1]
    key = catalog.find_key(model_map, name)
    entry = model_map.get(key) if key is not None else None
    found = MappingProxyType(dict(entry) if isinstance(entry, Mapping) else {})
    if len(_ENTRIES) >= MAX_ENTRIES:  # maps replaced by many reloads
        _ENTRIES.clear()
    _ENTRIES[(id(model_map), name)] = (model_map, found)
    return found


_ENTRIES: dict[tuple[int, str], tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
"""Map entries by map and model name; each holds its map, so no id is reused while it lives."""
MAX_ENTRIES = 1024


def _gateway_edits(decision: Decision, config: GatewayConfig, body: Mapping[str, Any]) -> Decision:
    """The edits the gateway makes beside the policy's: the upstream model name, metering."""
    if decision.rejected:
        return decision
    edits: dict[str, Any] = {}
    served = config.models.get(decision.alias)
    if served is not None and body.get("model") != served.model:
        edits["model"] = served.model
    options = body.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    if body.get("stream") is True and options.get("include_usage") is not True:
        edits["stream_options"] = {**options, "include_usage": True}
    if not edits:
        return decision
    if type(decision.set_fields) is dict:
        # `plan` made this dict for this decision alone (no one else holds it yet): completed
        # in place, as {**set_fields, **edits} would order it, without `replace`'s second
        # construction (a fifth of the plan's cost for a small request).
        decision.set_fields.update(edits)
        return decision
    return replace(decision, set_fields={**decision.set_fields, **edits})


def plan_route(
    config: GatewayConfig,
    model_map: Mapping[str, Any],
    facts: RequestFacts,
    body: Mapping[str, Any],
    *,
    target: Target | None = None,
) -> Decision:
    """Plan `body` for the alias in `facts` (or a fallback at `target`) under `config`."""
    route = config.models[target.alias if target is not None else facts.alias]
    capabilities = route_capabilities(route, model_map)
    decision = plan(config.policy, facts, body, route.wire_family, capabilities, target=target)
    decision = refuse_unpriced(decision, config, model_map, facts.alias)  # batch, ultrafast
    return _gateway_edits(decision, config, body)
