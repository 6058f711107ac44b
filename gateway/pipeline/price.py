"""Stage 7: what the request cost, by component, at the tier that actually served it.

When the upstream never reported usage (a stream cut off, a client that went away),
the tokens seen are counted with tiktoken and the cost is marked `estimated`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from gateway import tokens
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import Meter
from gateway.pricing import CostBreakdown, PriceBook, UnknownModelError, cost_of, settle_served
from gateway.usage import Usage

log = logging.getLogger("farebox.price")


def price_usage(ctx: RequestContext, usage: Usage, book: PriceBook, price_key: str) -> None:
    """Set `ctx.cost` for `usage`; an unpriced model costs nothing and is logged once."""
    ctx.usage = usage
    try:
        price = book.price(price_key)
    except UnknownModelError:
        if price_key not in _WARNED:
            _WARNED.add(price_key)
            log.warning("no price for %s: add it under `prices:` in the config", price_key)
        ctx.cost = None
        return
    ctx.cost = cost_of(price, usage, ctx.tier_served or "standard")


_WARNED: set[str] = set()


def settle_tier(ctx: RequestContext, meter: Meter) -> None:
    """The billed tier: what the upstream says it served, else the planned tier, unconfirmed."""
    self_hosted = ctx.route is not None and ctx.route.wire_family in ("vllm", "sglang")
    served = settle_served(
        ctx.tier_planned or ctx.tier_requested,
        meter.service_tier,
        meter.speed,
        self_hosted=self_hosted,
    )
    ctx.tier_served, ctx.tier_confirmed = served.tier, served.confirmed


async def usage_of(ctx: RequestContext, meter: Meter, cancelled: bool) -> Usage:
    """The upstream's usage, or an estimate from what was sent and seen.

    A call refused before it produced anything is not billed by providers: zero usage.
    One that produced output, or that the client abandoned mid-way, is estimated.
    """
    if meter.usage is not None:
        return meter.usage
    if not (meter.chunks or cancelled):
        return Usage()
    return await asyncio.to_thread(_estimate, ctx.body, meter.seen_reasoning, meter.seen_answer)


def _estimate(body: dict[str, Any], reasoning: str, answer: str) -> Usage:
    prompt = "".join(_message_text(m) for m in body.get("messages") or ())
    if body.get("tools"):
        prompt += orjson.dumps(body["tools"]).decode()
    reasoning_tokens = tokens.count_tokens(reasoning) if reasoning else 0
    answer_tokens = tokens.count_tokens(answer) if answer else 0
    return Usage(
        prompt_tokens=tokens.count_tokens(prompt),
        completion_tokens=reasoning_tokens + answer_tokens,
        reasoning_tokens=reasoning_tokens,
        estimated=True,
    )


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


__all__ = ["CostBreakdown", "price_usage", "settle_tier", "usage_of"]
