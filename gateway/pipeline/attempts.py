"""Call the upstream, retrying and falling back while nothing has reached the client.

Each attempt is booked as its own ledger row (same request id, attempt 0, 1, ...). Only
routes listed under `routing:` in the configuration retry or fall back: a retry is a
reviewed line of policy, never a surprise.

The upstream's circuit breaker hears only about the upstream: its failures (connect,
timeout, 429, 5xx, a reply it could not read) count, a request refused before it was
sent (the client's 400) frees the probe slot it held and counts for nothing. A stream's
outcome is told by the relay when it ends, since it can still fail after its first event.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from starlette.responses import Response

from gateway.errors import (
    CircuitOpenError,
    FareboxError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeoutError,
)
from gateway.pipeline import quota
from gateway.pipeline.context import BodyEdits, RequestContext
from gateway.pipeline.finish import end_task, finish
from gateway.pipeline.measure import Meter
from gateway.pipeline.policy import apply_policy
from gateway.pipeline.prefix import forget_parsed_for_litellm
from gateway.policy.decision import Decision
from gateway.policy.recovery import Recovery, Retrier, Target, recover
from gateway.services import Services

Attempt = Callable[[RequestContext, Services], Awaitable[Response]]


def upstream_key(ctx: RequestContext) -> str:
    """The breaker's key: one per provider, base URL and model."""
    assert ctx.route is not None
    return f"{ctx.route.provider}:{ctx.route.base_url or ''}:{ctx.route.model}"


def counts_against_upstream(error: UpstreamError) -> bool:
    """Failures that say the upstream is unwell; a 4xx about the request does not."""
    if isinstance(error, CircuitOpenError):
        return False
    if isinstance(error, UpstreamStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return True


def failure_status(error: UpstreamError) -> int | str:
    """The status the fallback rules match: an HTTP status, `timeout` or `connect`."""
    if isinstance(error, CircuitOpenError):
        return "circuit_open"
    if isinstance(error, UpstreamStatusError | UpstreamProtocolError):
        return error.status_code  # a reply that cannot be read is matched as 502
    return "timeout" if isinstance(error, UpstreamTimeoutError) else "connect"


def _retry_after(error: UpstreamError) -> float | None:
    headers = getattr(error, "headers", {}) or {}
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def call_with_recovery(
    ctx: RequestContext,
    services: Services,
    decision: Decision,
    base_edits: BodyEdits,
    send: Attempt,
) -> Response:
    """Send the request; on a failure before the first byte, retry or fall back by policy."""
    assert ctx.alias is not None
    configured = ctx.alias in services.config.routing
    retrier: Retrier | None = None  # made at the first failure: most requests have none
    current = Target(ctx.alias, decision.tier)
    tried: list[Target] = [current]
    number = 1
    while True:
        breaker = services.breakers.get(upstream_key(ctx), decision.breaker)
        try:
            if not breaker.allow():
                raise CircuitOpenError(f"upstream {ctx.alias} is failing; its circuit is open")
            response = await send(ctx, services)
            if not ctx.stream:
                breaker.record_success()  # a stream's outcome is reported by its relay
            return response
        except UpstreamError as error:
            if counts_against_upstream(error):
                breaker.record_failure()
            elif not isinstance(error, CircuitOpenError):
                breaker.release()
            recovery = Recovery("give_up")
            if configured:
                if retrier is None:
                    retrier = Retrier(decision.retry, rng=random)  # one generator per process
                status = failure_status(error)
                recovery = recover(
                    decision.fallbacks, retrier, current, number, status, tried, _retry_after(error)
                )
            final = recovery.action == "give_up"
            await finish(ctx, Meter(), services, error=error, final=final)
            if final or recovery.target is None:
                raise
        except BaseException:
            breaker.release()  # refused before sending, or cancelled: nothing about the upstream
            raise
        number = number + 1 if recovery.action == "retry" else 1
        await asyncio.sleep(recovery.delay_s)
        if recovery.action == "fallback":
            to = recovery.target
            services.metrics.fallbacks.labels(current.alias, current.tier, to.alias, to.tier).inc()
            current = recovery.target
            tried.append(current)
            _replan(ctx, services, base_edits, current)
        try:
            await quota.top_up(ctx, services)  # a dearer fallback holds more first, or is refused
        except FareboxError:
            end_task(ctx, services)  # the attempt before was booked as not the last
            raise
        ctx.attempt += 1


def report_outcome(ctx: RequestContext, services: Services, error: FareboxError | None) -> None:
    """Tell the breaker of the upstream that served `ctx` how its stream ended."""
    breaker = services.breakers.find(upstream_key(ctx))
    if breaker is None:
        return
    if error is None:
        breaker.record_success()  # also when the client left: the upstream was serving
    elif isinstance(error, UpstreamError) and counts_against_upstream(error):
        breaker.record_failure()
    else:
        breaker.release()


def _replan(ctx: RequestContext, services: Services, base_edits: BodyEdits, target: Target) -> None:
    """Plan the fallback afresh, from the edits made before the policy ran."""
    assert ctx.alias is not None
    ctx.edits = base_edits.copy()
    ctx.route = services.config.models[ctx.alias]
    ctx.cost = None
    ctx.usage = None
    apply_policy(ctx, services.config, services.prices, target=target)
    forget_parsed_for_litellm(ctx, services.prefix_checker)
