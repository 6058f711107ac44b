"""Stage 5: hold the request's worst case against its budgets and rate limits.

Before the upstream call the worst case (its input at the input price plus its clamped
output cap at the output price, at the tier it will be billed) is reserved against the
key's, the team's and the project's limits, all or nothing; a refusal is a 429 (or a 503
for a fail_closed budget whose state is away) and nothing is sent upstream. Each booked
attempt adds its cost; the last one settles the hold to what the whole request cost,
fallbacks included. A fallback to a dearer route first tops the hold up, or is refused.
A request that ends any other way gives its hold back (`close`): the engine's own hold
expiry is only the last resort for a process that died. While a request runs, a timer
renews its holds every `hold_s / 3` (a long stream outlives `hold_s`); the timer is
cancelled when the request ends, and dies with the process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from gateway.config import GatewayConfig
from gateway.errors import (
    BudgetStateUnavailableError,
    FareboxError,
    InsufficientQuotaError,
    RateLimitExceededError,
)
from gateway.ledger.records import utcnow
from gateway.pipeline.context import RequestContext
from gateway.pricing import PricingError
from gateway.pricing.money import money_str
from gateway.services import Services
from gateway.tenants import (
    BudgetExceeded,
    Limiter,
    RateLimited,
    Refusal,
    Reservation,
    Scope,
    ScopeLimits,
    Settlement,
)
from gateway.tenants.config import scope_limits

log = logging.getLogger("farebox.quota")

UNCAPPED_OUTPUT_TOKENS = 32_768
"""An uncapped request on a model whose maximum output the price map does not know."""
MESSAGE_OVERHEAD_TOKENS = 4  # the role and separators a chat template adds per message
OUTPUT_CAP_FIELDS = ("max_completion_tokens", "max_tokens")
RESERVED_HEADER = "x-farebox-budget-reserved-usd"
RENEWALS_PER_HOLD = 3  # two renewals in a row may fail before a live hold expires


class WorstCase(NamedTuple):
    """The most a request can cost, and the tokens it can use, as reserved before it."""

    usd: Decimal
    tokens: int


@dataclass(slots=True)
class QuotaHold:
    """One request's holds (the first reservation and any top-ups) and what it booked."""

    limiter: Limiter
    scopes: tuple[ScopeLimits, ...]
    reservation: Reservation
    top_ups: list[Reservation] = field(default_factory=list)
    spent_usd: Decimal = Decimal(0)  # booked by the attempts so far
    tokens: int = 0
    closed: bool = False
    renewal: asyncio.TimerHandle | None = None  # the next renewal, while the request runs
    renewing: asyncio.Task[None] | None = None  # a renewal under way

    @property
    def held_usd(self) -> Decimal:
        return self.reservation.worst_case_usd + sum(
            (hold.worst_case_usd for hold in self.top_ups), Decimal(0)
        )


def scopes_for(
    ctx: RequestContext, config: GatewayConfig, key_line: str | None = None
) -> tuple[ScopeLimits, ...]:
    """The limits that apply: the calling key's, its team's and its project's.

    A key's are counted under `key_line`, the first key of its rotation line
    (`KeyCache.line_of`), so rotating a key does not give it fresh budgets."""
    found: list[ScopeLimits | None] = []
    record = ctx.principal.key
    if record is not None:
        attributes = record.attributes
        scope = Scope("key", key_line or record.id)
        found.append(scope_limits(scope, attributes.budget, attributes.rate_limit))
    tenants = config.tenants
    team, project = ctx.identity.team, ctx.identity.project
    if team and (quota := tenants.teams.get(team)) is not None:
        found.append(scope_limits(Scope("team", team), quota.budget, quota.rate_limit))
    if project and (quota := tenants.projects.get(project)) is not None:
        found.append(scope_limits(Scope("project", project), quota.budget, quota.rate_limit))
    return tuple(limits for limits in found if limits is not None)


def input_tokens(ctx: RequestContext) -> int:
    """The prompt's size as the prefix check estimated it (a quarter of its bytes), plus
    each message's template tokens; never tokenized a second time."""
    if ctx.prefix is not None:
        estimate = ctx.prefix.check.record.total_tokens
    else:
        estimate = (len(ctx.raw_body) + 3) // 4
    messages = ctx.request.messages if ctx.request is not None else ()
    return estimate + MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)


def output_cap(body: dict[str, Any], model_info: dict[str, Any]) -> int:
    """The output the upstream may produce per choice: the clamped cap as sent, else the
    model's own maximum, else `UNCAPPED_OUTPUT_TOKENS`."""
    caps = [body.get(name) for name in OUTPUT_CAP_FIELDS]
    given = [cap for cap in caps if isinstance(cap, int) and not isinstance(cap, bool)]
    if given:
        return max(max(given), 0)
    for name in ("max_output_tokens", "max_tokens"):
        known = model_info.get(name)
        if isinstance(known, int) and known > 0:
            return known
    return UNCAPPED_OUTPUT_TOKENS


def worst_case(ctx: RequestContext, services: Services) -> WorstCase:
    """The request's worst case as planned now (after the policy, or a fallback's replan)."""
    assert ctx.alias is not None
    body = ctx.forwarded_body()
    price_key = services.config.price_key(ctx.alias)
    try:
        info = services.prices.model_info(price_key) or {}
    except PricingError:
        info = {}
    n = body.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    prompt, output = input_tokens(ctx), output_cap(body, info) * choices
    try:
        price = services.prices.price(price_key)
    except PricingError:
        return WorstCase(Decimal(0), prompt + output)  # unpriced: booked at 0 as well
    rates = price.quote(ctx.tier_planned or "standard", prompt).rates
    input_rate = rates.input
    if ctx.route is not None and ctx.route.wire_family == "anthropic":
        # Anthropic bills cache writes above the input price; a 1-hour write only when asked.
        input_rate = max(input_rate, rates.cache_write)
        if b'"1h"' in ctx.raw_body:
            input_rate = max(input_rate, rates.cache_write_1h)
    output_rate = max(rates.output, rates.reasoning)
    return WorstCase(prompt * input_rate + output * output_rate, prompt + output)


def refusal_error(refusal: Refusal) -> FareboxError:
    """The OpenAI-shaped error for the engine's refusal."""
    if isinstance(refusal, BudgetExceeded):
        return InsufficientQuotaError(refusal.message, headers=refusal.headers)
    if isinstance(refusal, RateLimited):
        return RateLimitExceededError(
            refusal.message, error_type=refusal.error_type, headers=refusal.headers
        )
    return BudgetStateUnavailableError(refusal.message, headers=refusal.headers)


async def reserve(
    ctx: RequestContext, services: Services, prefix_ready: Callable[[], None] | None = None
) -> None:
    """Hold the worst case, or raise the refusal; a request no limit applies to passes.

    `prefix_ready` settles a prefix check left to run beside the upstream call
    (`prefix_pending`): a limit's worst case takes the check's token estimate.
    """
    scopes = limits_of(ctx, services)
    if scopes:
        await hold(ctx, services, scopes, prefix_ready)


def limits_of(ctx: RequestContext, services: Services) -> tuple[ScopeLimits, ...]:
    """`scopes_for` the request's key (by its rotation line): empty when no limit applies."""
    record = ctx.principal.key
    line = services.keys.line_of(record) if record is not None else None
    return scopes_for(ctx, services.config, line)


async def hold(
    ctx: RequestContext,
    services: Services,
    scopes: tuple[ScopeLimits, ...],
    prefix_ready: Callable[[], None] | None = None,
) -> None:
    """`reserve` for the `scopes` that apply (`limits_of`, not empty). `prefix_ready` runs
    first, before anything can fail or be cut: the check has run however the hold ends."""
    if prefix_ready is not None:
        prefix_ready()
    worst = worst_case(ctx, services)
    held = await services.limiter.reserve(scopes, worst.usd, worst.tokens)
    if not isinstance(held, Reservation):
        raise refusal_error(held)
    ctx.quota = QuotaHold(services.limiter, scopes, held)
    _schedule_renewal(ctx.quota)
    _say_reserved(ctx, ctx.quota)


async def top_up(ctx: RequestContext, services: Services) -> None:
    """Before a fallback attempt: hold what its worst case needs beyond the holds, or raise.

    The top-up holds budgets only: the fallback is the same request to a rate limit.
    """
    hold = ctx.quota
    if hold is None or hold.closed:
        return
    need = hold.spent_usd + worst_case(ctx, services).usd - hold.held_usd
    budgets = tuple(ScopeLimits(s.scope, s.budgets) for s in hold.scopes if s.budgets)
    if need <= 0 or not budgets:
        return
    extra = await hold.limiter.reserve(budgets, need, 0)
    if not isinstance(extra, Reservation):
        raise refusal_error(extra)
    hold.top_ups.append(extra)
    _say_reserved(ctx, hold)


def _say_reserved(ctx: RequestContext, hold: QuotaHold) -> None:
    """Tell the client what its request holds against its budgets (the worst case)."""
    ctx.response_headers[RESERVED_HEADER] = money_str(hold.held_usd)


async def book(
    ctx: RequestContext, services: Services, cost: Decimal, tokens: int, final: bool
) -> None:
    """Add an attempt's booked cost; the final attempt settles the hold to the total."""
    hold = ctx.quota
    if hold is None or hold.closed:
        return
    hold.spent_usd += cost
    hold.tokens += tokens
    if final:
        await _end(hold, services)


async def close(ctx: RequestContext, services: Services) -> None:
    """The safety net for a request that ended without its final booking: settle what its
    attempts booked, or give the hold back when nothing was."""
    hold = ctx.quota
    if hold is not None and not hold.closed:
        await _end(hold, services)


async def _end(hold: QuotaHold, services: Services) -> None:
    """Settle the first hold to the whole cost (the top-ups are then given back), or
    release it all when no attempt used anything."""
    hold.closed = True
    _stop_renewal(hold)
    settlement = None
    if hold.spent_usd > 0 or hold.tokens > 0:
        settlement = await hold.limiter.settle(hold.reservation, hold.spent_usd, hold.tokens)
    else:
        await hold.limiter.release(hold.reservation)
    for reservation in hold.top_ups:
        await hold.limiter.release(reservation)
    if settlement is not None:
        _count_soft_limits(settlement, services)


def _schedule_renewal(hold: QuotaHold) -> None:
    """Renew the holds in a third of `hold_s`: one timer, so that a request shorter than
    that costs nothing more; a timer dies with its process, whose holds then expire."""
    if not hold.closed:
        delay = hold.limiter.hold_s / RENEWALS_PER_HOLD
        hold.renewal = asyncio.get_running_loop().call_later(delay, _start_renewal, hold)


def _start_renewal(hold: QuotaHold) -> None:
    hold.renewal = None
    if not hold.closed:
        hold.renewing = asyncio.get_running_loop().create_task(_renew(hold))


async def _renew(hold: QuotaHold) -> None:
    """Renew the first hold and the top-ups, then schedule the next renewal."""
    try:
        now = utcnow()
        for reservation in (hold.reservation, *hold.top_ups):
            if not await hold.limiter.renew(reservation, now):
                log.warning("budget hold %s was gone when renewed", reservation.id)
            elif reservation is hold.reservation and not hold.closed:
                # The settle moves rate limits only for a hold live until now.
                expires = now + timedelta(seconds=hold.limiter.hold_s)
                hold.reservation = replace(reservation, expires_at=expires)
    except Exception:  # a bare RedisLimiter raises; the next renewal may get through
        log.exception("budget hold %s not renewed", hold.reservation.id)
    finally:
        hold.renewing = None
        _schedule_renewal(hold)


def _stop_renewal(hold: QuotaHold) -> None:
    """The request ended: no renewal after it (one under way is cancelled)."""
    if hold.renewal is not None:
        hold.renewal.cancel()
        hold.renewal = None
    if hold.renewing is not None:
        hold.renewing.cancel()
        hold.renewing = None


def _count_soft_limits(settlement: Settlement, services: Services) -> None:
    for crossed in settlement.soft_limits_crossed:
        log.warning(
            "%s passed its soft limit: $%s of $%s %s",
            crossed.scope, crossed.spent_usd, crossed.limit_usd, crossed.period,
        )  # fmt: skip
        services.metrics.soft_limit(crossed.scope.kind, crossed.scope.id, crossed.period)
