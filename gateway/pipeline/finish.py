"""Stages 6-8 once a reply is over: settle what was measured, price it, record it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.drain import Shield
from gateway.errors import FareboxError, UpstreamError, UpstreamStatusError
from gateway.pipeline import quota
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import Meter
from gateway.pipeline.prefix import judge, remember
from gateway.pipeline.prefix_pending import PendingPrefix
from gateway.pipeline.price import price_usage, settle_tier, usage_of
from gateway.pipeline.record import BookedCost, booked_cost, ledger_record, observe_metrics
from gateway.pricing import PricingError
from gateway.pricing.money import ZERO  # `Decimal(0)` built once: ~0.3 us a call
from gateway.services import Services
from gateway.upstream.base import UpstreamStream


def settle(ctx: RequestContext, meter: Meter, error: FareboxError | None, cancelled: bool) -> None:
    """Copy what the meter saw into the context: timings and outcome."""
    timings = ctx.timings
    timings.first_token = meter.first_token
    timings.first_answer_token = meter.first_answer_token
    timings.last_token = meter.last_token
    timings.finished = time.perf_counter()
    read = meter.tier_read
    if read is None or read != _tier_inputs(ctx, meter):  # else settled by `price_now`
        settle_tier(ctx, meter)
    if error is not None:
        ctx.status_code, ctx.error_type = error.status_code, ledger_error_type(error)
    elif cancelled:
        ctx.status_code, ctx.error_type = 499, "client_disconnected"
    else:
        ctx.status_code, ctx.error_type = 200, None  # a retry that succeeded has no error


def ledger_error_type(error: FareboxError) -> str:
    """What a row records: the gateway's own code for an upstream failure it diagnosed
    (`upstream_unreachable`, `upstream_timeout`, `upstream_bad_reply`, `circuit_open`),
    else the OpenAI error type the client saw."""
    if isinstance(error, UpstreamError) and not isinstance(error, UpstreamStatusError):
        return error.code or error.error_type
    return error.error_type


def _judge_prefix(ctx: RequestContext, services: Services) -> None:
    """The cache verdict, priced at the input and cached-input rates the call paid."""
    assert ctx.prefix is not None and ctx.alias is not None
    cost, tier = ctx.cost, ctx.tier_served or "standard"
    if cost is not None and cost.rates is not None and cost.tier == tier:
        # `price_usage` quoted these for this usage (`ctx.usage`, set with `ctx.cost`) and
        # tier moments ago: the same rates again, without the look-ups and the quote.
        judge(ctx.prefix, ctx, cost.rates.input, cost.rates.cached_input)
        return
    input_price = cached_price = ZERO
    try:
        price = services.prices.price(services.config.price_key(ctx.alias))
        rates = price.quote(tier, ctx.usage.prompt_tokens if ctx.usage else 0).rates
        input_price, cached_price = rates.input, rates.cached_input
    except PricingError:
        pass  # an unpriced model still gets a verdict; it loses no money
    judge(ctx.prefix, ctx, input_price, cached_price)


def _tier_inputs(ctx: RequestContext, meter: Meter) -> tuple[Any, ...]:
    """Everything `settle_tier` reads: the same again, it would settle the same tier."""
    return (ctx, meter.service_tier, meter.speed, ctx.route, ctx.tier_planned, ctx.tier_requested)


def price_now(ctx: RequestContext, meter: Meter, services: Services) -> None:
    """Price the usage the upstream reported, as soon as it arrives (the stream's last chunk)."""
    assert ctx.alias is not None and meter.usage is not None
    settle_tier(ctx, meter)
    meter.tier_read = _tier_inputs(ctx, meter)
    price_usage(ctx, meter.usage, services.prices, services.config.price_key(ctx.alias))


async def finish(
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    *,
    error: FareboxError | None = None,
    cancelled: bool = False,
    final: bool = True,
) -> None:
    """Settle, price and record the attempt, then hand it to the observers.

    `final` is False for an attempt that will be retried or fallen back from: it gets its
    own ledger row, but does not finish the task.
    """
    booking = await bill(ctx, meter, services, error=error, cancelled=cancelled, final=final)
    await booking()


async def bill(
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    *,
    error: FareboxError | None = None,
    cancelled: bool = False,
    final: bool = True,
    notify: bool = False,
) -> Booking:
    """Settle and price the attempt and book its cost against the quota and the task: all
    that its reply needs (the cost headers and `usage.cost`). What is left to record, the
    returned `Booking` does: a whole reply calls it after its last byte (`finish`, at once).

    `notify`: the observers, if any, hear of the attempt now (its prefix judged first),
    before its reply goes out, so that an observer's failure is the reply's (a 500), as
    it was when everything was recorded before the reply.

    A failure here still records the attempt (the row is never lost): the booking runs,
    shielded, before the error goes on.
    """
    settle(ctx, meter, error, cancelled)
    assert ctx.alias is not None and ctx.task is not None
    usage = meter.usage  # as reported: no estimate to make (a coroutine fewer)
    if usage is None:
        usage = await usage_of(ctx, meter, cancelled)
    if ctx.cost is None or ctx.usage is not usage:
        price_usage(ctx, usage, services.prices, services.config.price_key(ctx.alias))
    booking = Booking(ctx, services, booked_cost(ctx), final)
    try:
        if ctx.quota is not None:  # else no limit applies: nothing to book
            await quota.book(ctx, services, booking.booked.total, usage.total_tokens, final)
        if ctx.task.implicit:  # a task of this request alone: its cost is its attempts' sum
            ctx.task_cost = (ctx.task_cost or ZERO) + booking.booked.total
        else:
            ttl = services.config.tasks.idle_timeout_s * 2
            total = booking.booked.total
            ctx.task_cost = await services.state.add_task_cost(ctx.task.task_id, total, ttl)
        if notify:
            booking.notify()
    except BaseException:
        with Shield():
            await booking()
        raise
    return booking


async def book_after(
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    reply: Callable[[], Response],
    billed: Callable[[], Awaitable[None]] | None = None,
) -> Response:
    """Bill the attempt, await `billed` (what needs its cost before the reply goes out),
    then make its whole reply (`reply()`, with its cost), whose background books the rest
    after the reply's last byte, as a chat reply's does.

    `reply` makes a `chat.WholeReply` (`chat.json_response`), which runs its background,
    shielded, when the sending fails or is cut: the paid call is booked all the same.
    """
    booking = await bill(ctx, meter, services, notify=True)
    try:
        if billed is not None:
            await billed()
        response = reply()
    except BaseException:
        with Shield():
            await booking()
        raise
    response.background = booking
    return response


async def settle_or_book(
    pending: PendingPrefix,
    ctx: RequestContext,
    meter: Meter,
    services: Services,
    stream: UpstreamStream | None = None,
) -> None:
    """`pending.settle()` once the upstream answered (the reply's headers carry the check's);
    when the check raises, the paid call is booked all the same (its `stream` closed first),
    then the error goes on."""
    try:
        pending.settle()
    except BaseException:
        if stream is not None:
            await stream.aclose()
        with Shield():
            await finish(ctx, meter, services)
        raise


class Booking(BackgroundTask):
    """The rest of an attempt's recording once it is billed: the prefix verdict, the ledger
    row, the metrics, the task's end, the prompt's history and the observers.

    None of it changes the reply, so a whole reply runs it after its last byte is written
    (`chat._complete`), all but the verdict and the observers (`notify`). The synchronous
    steps come first: a request that follows the reply (a /metrics scrape, the ledger's
    next flush) finds them done. Then the prompt's history is remembered (its write to a
    shared store goes out in the same turn of the loop), and the observers hear of the
    attempt last, unless they already have.

    A `BackgroundTask` for the response, without Starlette's `__init__` (its
    `is_async_callable` check: ~2 µs a request).
    """

    def __init__(
        self, ctx: RequestContext, services: Services, booked: BookedCost, final: bool
    ) -> None:
        self.ctx = ctx  # no super().__init__: see above
        self.services = services
        self.booked = booked
        self.final = final
        self.judged = False
        self.notified = False

    def notify(self) -> None:
        """Judge the prompt's prefix and hand the attempt to the observers now; with none
        (no tracing, the usual case) both wait for the booking: the verdict is ~30 µs."""
        if not self.services.observers:
            return
        self._judge()
        self.notified = True  # once, even when an observer fails
        self.services.notify(self.ctx)

    def _judge(self) -> None:
        if not self.judged:
            self.judged = True
            if self.ctx.prefix is not None and self.ctx.status_code == 200:
                _judge_prefix(self.ctx, self.services)

    async def __call__(self) -> None:
        ctx, services = self.ctx, self.services
        self._judge()
        services.ledger.submit(ledger_record(ctx, self.booked, attempt=ctx.attempt))
        observe_metrics(services.metrics, ctx, self.booked)
        if self.final:
            end_task(ctx, services)
        try:
            if ctx.prefix is not None and ctx.status_code == 200:
                await remember(ctx.prefix, services.state)
        finally:  # a cut while a shared store is written still reaches the observers
            if not self.notified:
                self.notified = True
                services.notify(ctx)


def end_task(ctx: RequestContext, services: Services) -> None:
    """Close the task when this was its last request (`X-Task-Done`), as the last attempt
    ended: `success` or `failed`.

    A request without a task id costs nothing more: its row is stored `untasked` from the
    start (no finish to write), and its cost is observed here, not after a ledger round.
    """
    assert ctx.task is not None
    if ctx.task.implicit:
        services.metrics.observe_task(ctx.identity.team, "untasked", ctx.task_cost or ZERO)
        return
    if not ctx.task.done:
        return
    outcome = "success" if ctx.status_code == 200 else "failed"
    services.ledger.finish_task(ctx.task.task_id, outcome)
