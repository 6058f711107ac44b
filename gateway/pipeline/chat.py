"""One chat-completions request, top to bottom.

    parse -> identify -> decide -> entitle -> claim task -> apply policy -> check prefix
          -> reserve quota -> call upstream -> measure -> price -> record (and settle)

Each stage is its own module; this one only puts them in order and owns the two ways a
reply goes back (whole, or streamed through `relay`). Failures before the first byte go
to `attempts`, which retries or falls back by policy and books every attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.body_guard import SharedDeadlines
from gateway.compact_patch import patch_rendered
from gateway.drain import Shield
from gateway.errors import UpstreamTimeoutError, UpstreamUnreachableError
from gateway.http_headers import safe_headers
from gateway.otel.propagation import upstream_headers as upstream_trace_headers
from gateway.pipeline import quota
from gateway.pipeline.attempts import call_with_recovery
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.entitle import entitle
from gateway.pipeline.finish import bill, finish
from gateway.pipeline.identify import identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.offload import on_loop, patch_size, sized
from gateway.pipeline.parse import parse_request
from gateway.pipeline.plan import plan_now, plan_task
from gateway.pipeline.policy import capabilities
from gateway.pipeline.prefix import rule_for_route
from gateway.pipeline.prefix_pending import PendingPrefix, start_prefix_check
from gateway.pipeline.relay import Relay, RelayResponse
from gateway.pipeline.respond import cost_values, with_cost
from gateway.pipeline.thinking_cap import thinking_cap_for
from gateway.pipeline.tier_report import tier_headers
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.settings import Timeouts
from gateway.upstream.base import UpstreamCall, UpstreamStream
from gateway.upstream.http_stream import ready_event
from gateway.upstream.param_support import dropped_notice, notice_headers


async def handle_chat(ctx: RequestContext, services: Services) -> Response:
    """Run the pipeline for one request and return the response to send."""
    services = services.for_request()  # one configuration, from parsing to the ledger row
    await parse_request(ctx, services.prefix_checker.reuse)  # megabytes: a slice at a time
    identify(ctx)
    decide(ctx, services.config)
    entitle(ctx)  # the key's models, tiers, n and output cap
    assert ctx.alias is not None
    base_edits = ctx.edits.copy()
    # A named task's owner and pinned effort are shared state; most requests have neither.
    decision = plan_now(ctx, services) or await plan_task(ctx, services)
    rule = rule_for_route(ctx, capabilities(services.prices, services.config, ctx.alias))
    # On a route that only observes, the check's CPU part runs while the upstream works.
    pending = await start_prefix_check(ctx, services.prefix_checker, services.state, rule)
    limits = quota.limits_of(ctx, services)  # most requests have none: nothing to await
    if limits:  # the check settles first: a refusal's reply carries its headers
        await quota.hold(ctx, services, limits, pending.settle)  # refused: not sent, nor booked
    send = partial(_stream if ctx.stream else _complete, pending=pending)
    try:
        return await call_with_recovery(ctx, services, decision, base_edits, send)
    except BaseException:
        pending.run_now()
        with Shield():
            await quota.close(ctx, services)  # no error path keeps a hold
        raise


def route_timeouts(ctx: RequestContext, services: Services) -> Timeouts:
    """The route's own limits when its routing sets them, else the process settings."""
    assert ctx.alias is not None
    routing = services.config.routing.get(ctx.alias)
    if routing is None or "timeouts" not in routing.model_fields_set:
        return services.settings.timeouts
    limits = routing.timeouts
    return Timeouts(
        connect=limits.connect_s, first_token=limits.first_token_s, idle_stream=limits.idle_s
    )


def _build_call(ctx: RequestContext, services: Services) -> UpstreamCall:
    """The upstream call, with the client's bytes changed only where a stage asked."""
    assert ctx.alias is not None and ctx.route is not None
    body = ctx.raw_body
    if ctx.edits:
        edits = ctx.edits
        fast = patch_rendered(body, ctx.body, edits.set_fields, edits.remove)
        body = fast or patch_object(body, edits.set_fields, edits.remove, trusted=True)
    parsed = ctx.forwarded_body()
    call = services.upstreams.build_call(ctx.alias, ctx.route, body, parsed, ctx.stream)
    call.timeouts = route_timeouts(ctx, services)
    call.extra_headers = {**ctx.upstream_headers, **upstream_trace_headers()}  # {} when off
    return call


def _headers(ctx: RequestContext, *more: dict[str, str]) -> dict[str, str]:
    """The reply's headers, then `more`'s (as `|` would add them), each value sendable."""
    headers = {"x-request-id": ctx.request_id}
    if ctx.task is not None and not ctx.task.implicit:
        headers["x-task-id"] = ctx.task.task_id
    headers["x-farebox-tier"] = ctx.tier_served or ctx.tier_planned or "standard"
    headers |= tier_headers(ctx)
    headers |= ctx.response_headers  # in place: the dict is this call's own
    for extra in more:
        headers |= extra
    return safe_headers(headers)  # a task id may hold anything


async def _complete(ctx: RequestContext, services: Services, pending: PendingPrefix) -> Response:
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    adapter = services.upstreams.adapter(call.route)
    meter = Meter()
    pending.while_waiting_for(call, adapter)
    ctx.timings.upstream_sent = time.perf_counter()
    try:
        reply = await adapter.complete(call)  # a failure is booked by the caller
    except asyncio.CancelledError:
        # Cut while the upstream works on it (shutdown past its grace period): the call
        # is paid for, so it is booked, as 499 with its tokens estimated.
        pending.run_now()
        with Shield():
            await finish(ctx, meter, services, cancelled=True)
        raise
    except BaseException:
        pending.run_now()  # the failure's row and a retry have the check's outcome
        raise
    reply_json = reply.payload  # parsed and checked by the adapter: a bad reply is a 502
    meter.observe_reply(reply_json)
    try:
        pending.settle()  # ran while the upstream worked, or now; its error is raised here
    except BaseException:
        with Shield():
            await finish(ctx, meter, services)  # the paid call is booked all the same
        raise
    # A native reply's own headers are not believed: not read (nor decoded).
    via_litellm = call.route.via_litellm
    ctx.dropped_params = dropped_notice(True, reply.headers) if via_litellm else None
    # Priced, billed and told to the observers now (the cost goes in the reply); the rest
    # of the booking (ledger row, metrics, prefix history) runs after the reply's last byte.
    booking = await bill(ctx, meter, services, notify=True)
    try:
        body = with_cost(reply_json, reply.body, ctx, rendered=reply.rendered)
        # Every value made sendable in one pass, the notice's too (a dropped field's name
        # is the client's: sent as it was, one outside Latin-1 failed the paid reply).
        headers = _headers(ctx, cost_values(ctx), notice_headers(ctx.dropped_params))
        response = json_response(body, reply.status, headers, sendable=True)
    except BaseException:
        with Shield():
            await booking()
        raise
    response.background = booking
    return response


def json_response(
    body: bytes, status: int, headers: dict[str, str], *, sendable: bool = False
) -> Response:
    """`Response(body, status, headers, media_type="application/json")`, its head built here.

    The same status, body and raw headers in the same order (each name lower-cased, then
    content-length and content-type, unless `headers` has them), without Starlette's
    generic path: `render`, a list of the names and the text/ charset check per reply.
    `sendable`: every value passed `safe_headers` (printable ASCII, whose Latin-1 bytes
    are its UTF-8 bytes: encoded without naming the codec, which costs a lookup each).
    """
    if (
        "content-length" in headers
        or "content-type" in headers
        or status < 200
        or status in (204, 304)
    ):
        return WholeReply(body, status_code=status, media_type="application/json", headers=headers)
    names = _NAMES.get(tuple(headers))  # a reply's names are the same reply after reply
    if names is None:
        names = _names_of(headers)
    if sendable:
        raw = list(zip(names, map(str.encode, headers.values()), strict=True))
    else:
        raw = list(zip(names, [value.encode("latin-1") for value in headers.values()], strict=True))
    raw.append((b"content-length", b"%d" % len(body)))
    raw.append(_JSON_TYPE)
    response = WholeReply.__new__(WholeReply)
    response.status_code = status
    response.media_type = "application/json"
    response.background = None
    response.body = body
    response.raw_headers = raw
    return response


_JSON_TYPE = (b"content-type", b"application/json")
_NAMES: dict[tuple[str, ...], tuple[bytes, ...]] = {}
"""A reply's header names as they go out (lower case, Latin-1), by the names it has: the
few lists the gateway's replies have, each encoded once, not per reply."""
MAX_NAMES = 256


def _names_of(headers: dict[str, str]) -> tuple[bytes, ...]:
    names = tuple(name.lower().encode("latin-1") for name in headers)
    if len(_NAMES) >= MAX_NAMES:
        _NAMES.clear()
    _NAMES[tuple(headers)] = names
    return names


class WholeReply(Response):
    """A whole reply, whose `background` (the attempt's booking) runs after its last byte.

    As Starlette's `Response`, but the background also runs, shielded, when the sending
    fails or is cut (a shutdown past its grace period): the paid call is still booked.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, headers = self.status_code, self.raw_headers
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": self.body})
        except BaseException:
            if self.background is not None:
                with Shield():
                    await self.background()
            raise
        if self.background is not None:
            await self.background()


async def _stream(ctx: RequestContext, services: Services, pending: PendingPrefix) -> Response:
    """Open the upstream stream and wait for its first event before answering.

    Until the first event arrives nothing has reached the client, so a failure here is
    still an ordinary HTTP error, or a retry or fallback.
    """
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    adapter = services.upstreams.adapter(call.route)
    meter = Meter()
    pending.while_waiting_for(call, adapter)
    ctx.timings.upstream_sent = time.perf_counter()
    try:
        stream = await adapter.open_stream(call)
    except BaseException:
        pending.run_now()  # the failure's row and a retry have the check's outcome
        raise
    try:
        pending.settle()  # the reply's headers carry the check's
    except BaseException:
        await stream.aclose()
        with Shield():
            await finish(ctx, meter, services)  # the paid call is booked all the same
        raise
    events = stream.events()
    first = await first_event(stream, events, call)
    if call.route.via_litellm:  # a native stream's own headers are not believed: not read
        ctx.dropped_params = dropped_notice(True, stream.headers)
    body = Relay(ctx, first, events, stream, meter, services, thinking_cap_for(ctx, call, services))
    # No cancel scope of its own for the shutdown's cut: the relay's shields are
    # `drain.Shield`s, which the request's native cut respects (gateway.drain).
    return RelayResponse(body, headers=_headers(ctx) | notice_headers(ctx.dropped_params))


# The first-event deadline of each length in use: one timer for every stream waiting.
_FIRST_EVENT: dict[float, SharedDeadlines] = {}


def _first_event_deadlines(seconds: float) -> SharedDeadlines:
    deadlines = _FIRST_EVENT.get(seconds)
    if deadlines is None:
        deadlines = _FIRST_EVENT.setdefault(seconds, SharedDeadlines(seconds))
    return deadlines


async def first_event(
    stream: UpstreamStream, events: AsyncIterator[bytes], call: UpstreamCall
) -> bytes:
    """The stream's first event, within the route's first-token limit (one shared timer).

    An event whose bytes came with the reply's head (as a fast upstream sends them) is
    taken at once: no wait, so no deadline to set up.
    """
    ready = ready_event(events)
    if ready is not None:
        return ready
    seconds = call.timeouts.first_token
    try:
        return await _first_event_deadlines(seconds).within(anext(events))
    except TimeoutError:
        await stream.aclose()
        raise UpstreamTimeoutError(
            f"upstream {call.alias} sent nothing within {call.timeouts.first_token:g} s"
        ) from None
    except StopAsyncIteration:
        await stream.aclose()
        raise UpstreamUnreachableError(
            f"upstream {call.alias} closed the stream before sending anything"
        ) from None
    except BaseException:
        await stream.aclose()
        raise
