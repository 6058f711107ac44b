"""What the client is told about cost: response headers and `usage.cost`.

The usage object keeps every field the upstream sent, in order; only `cost` is added,
so the official SDK still parses it (unknown fields are allowed there).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.compact_patch import patch_rendered
from gateway.http_headers import safe_headers
from gateway.pipeline.context import RequestContext
from gateway.pipeline.record import booked_cost
from gateway.pricing.money import money_str
from gateway.rawjson import RawJsonError, patch_object

log = logging.getLogger("farebox.respond")


def cost_object(ctx: RequestContext) -> dict[str, Any]:
    """The `usage.cost` breakdown: USD as exact decimal strings, per component."""
    booked = booked_cost(ctx)
    body: dict[str, Any] = {"currency": "USD", "total": money_str(booked.total)}
    for name, value in booked.components.items():  # a loop: no comprehension's frame and dict
        body[name] = money_str(value) if value else "0"  # most are zero: `money_str`'s "0"
    body["tier"] = ctx.tier_served or "standard"
    body["tier_confirmed"] = ctx.tier_confirmed
    body["priced"] = ctx.cost is not None
    body["estimated"] = bool(ctx.usage and ctx.usage.estimated)
    return body


def cost_headers(ctx: RequestContext) -> dict[str, str]:
    """`X-Farebox-Cost-Usd` and `X-Farebox-Task-Cost-Usd` for a whole reply."""
    return safe_headers(cost_values(ctx))


def cost_values(ctx: RequestContext) -> dict[str, str]:
    """`cost_headers` before `safe_headers`: for a caller that passes its whole reply's
    headers through it at once."""
    headers = {"x-farebox-cost-usd": money_str(booked_cost(ctx).total)}
    if ctx.task_cost is not None:
        headers["x-farebox-task-cost-usd"] = money_str(ctx.task_cost)
    return headers


def with_cost(
    payload: dict[str, Any], raw: bytes, ctx: RequestContext, *, rendered: bool = False
) -> bytes:
    """`raw` (a reply or chunk) with `usage.cost` added and every other byte kept.

    `rendered`: `raw` is `orjson.dumps(payload)`, made so by the caller (a reply the
    adapter conformed): not rendered again to check it."""
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return raw
    edit = {"usage": {**usage, "cost": cost_object(ctx)}}
    fast = patch_rendered(raw, payload, edit, rendered=rendered)  # no member scan
    if fast is not None:
        return fast
    try:
        return patch_object(raw, edit, trusted=True)
    except RawJsonError:  # parsed, yet not patchable: the reply goes out as it came
        log.warning("usage.cost left out: the reply's bytes could not be patched")
        return raw
