"""One OpenAI Responses request (`POST /v1/responses`), through the chat pipeline's stages.

    parse -> chain (previous_response_id) -> identify -> decide -> entitle -> claim task
          -> apply policy -> check prefix -> reserve quota -> call upstream -> measure
          -> price -> record (and settle) -> keep the response for the chain

A `previous_response_id` is resolved by the gateway (`gateway.state.responses`): the
kept conversation is put before the new input, the task id is carried along the chain
when the client names none, and an unknown, expired or another caller's id is OpenAI's
400 `previous_response_not_found`. The upstream then gets a stateless request.

A route with `wire: responses` gets the request natively (the client's bytes with only
the policy's edits; `gateway.upstream.responses`); any other route gets it translated to
chat completions and its reply translated back (`gateway.upstream.responses_wire`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

import orjson
from starlette.responses import Response

from gateway.config import GatewayConfig
from gateway.drain import Shield
from gateway.errors import InvalidRequestError, ModelNotFoundError
from gateway.http_headers import safe_headers
from gateway.otel.propagation import upstream_headers as upstream_trace_headers
from gateway.pipeline import quota
from gateway.pipeline.attempts import call_with_recovery
from gateway.pipeline.chat import first_event, json_response, route_timeouts
from gateway.pipeline.entitle import entitle, may_use
from gateway.pipeline.event_relay import Source, event_payload, prepend
from gateway.pipeline.finish import book_after, finish, settle_or_book
from gateway.pipeline.identify import identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.offload import on_loop, patch_size, sized
from gateway.pipeline.plan import plan_now, plan_task
from gateway.pipeline.policy import capabilities
from gateway.pipeline.prefix import rule_for_route
from gateway.pipeline.prefix_pending import PendingPrefix, sent_with
from gateway.pipeline.respond import cost_headers, cost_object, with_cost
from gateway.pipeline.responses_cap import capped_native
from gateway.pipeline.responses_meter import ResponsesMeter
from gateway.pipeline.responses_prefix import start_responses_prefix
from gateway.pipeline.responses_relay import (
    Relayed,
    ResponsesRelay,
    ResponsesRelayResponse,
    TranslatedResponses,
)
from gateway.pipeline.responses_request import (
    ResponsesContext,
    chat_edits_over,
    native_edits,
    parse_responses,
    policy_view,
)
from gateway.pipeline.task_claim import task_owner
from gateway.pipeline.thinking_cap import CappedStream, thinking_cap_for
from gateway.pipeline.tier_report import tier_headers
from gateway.pipeline.wire_prefix import translated_fields
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.state.responses import ResponseStore, StoredResponse
from gateway.upstream.base import UpstreamCall
from gateway.upstream.responses import ResponsesUpstream
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.upstream.responses_wire import chat_body, input_items, new_id, response_from_chat
from gateway.usage import Usage

SESSION_HEADER = "session-id"
"""Codex's per-session id (a UUID), sent on every request: the task id by default."""
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def not_found(response_id: str) -> InvalidRequestError:
    """OpenAI's answer to a previous_response_id it does not have."""
    return InvalidRequestError(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


async def handle_responses(ctx: ResponsesContext, services: Services) -> Response:
    """Run the pipeline for one Responses request and return the response to send."""
    services = services.for_request()
    small = on_loop(len(ctx.raw_body))  # the usual body: no coroutine for `sized`
    if small:
        parse_responses(ctx)
    else:
        await sized(len(ctx.raw_body), parse_responses, ctx)
    store = ResponseStore(services.state, services.settings.responses_ttl_s)
    previous = await _chain(ctx, store)
    if small:
        ctx.body = policy_view(ctx.native, ctx.items)
    else:
        ctx.body = await sized(len(ctx.raw_body), policy_view, ctx.native, ctx.items)
    identify(ctx)
    if previous is not None and not previous.readable_by(
        task_owner(ctx.principal, ctx.identity), ctx.identity.caller
    ):
        raise not_found(str(ctx.native.get("previous_response_id")))  # another team's
    decide_responses(ctx, services.config)
    entitle(ctx)
    base_edits = ctx.edits.copy()
    # A named task's owner and pinned effort are shared state; most requests have neither.
    decision = plan_now(ctx, services) or await plan_task(ctx, services)
    assert ctx.alias is not None
    rule = rule_for_route(ctx, capabilities(services.prices, services.config, ctx.alias))
    # Where it changes nothing sent, the check's CPU part runs while the upstream reads the
    # request (`start_responses_prefix`).
    pending = await start_responses_prefix(
        ctx, services.prefix_checker, services.state, rule, native_route(ctx)
    )
    limits = quota.limits_of(ctx, services)  # most requests have none: nothing to await
    if limits:  # the check settles first: a refusal's reply carries its headers
        await quota.hold(ctx, services, limits, pending.settle)  # refused: not sent, nor booked
    sender = _Sender(store, pending)
    send = sender.stream if ctx.stream else sender.complete
    try:
        return await call_with_recovery(ctx, services, decision, base_edits, send)  # type: ignore[arg-type]
    except BaseException:
        pending.run_now()
        with Shield():
            await quota.close(ctx, services)
        raise


async def _chain(ctx: ResponsesContext, store: ResponseStore) -> StoredResponse | None:
    """Expand previous_response_id into the input; name the task the chain carries."""
    assert ctx.responses is not None
    own = input_items(ctx.native.get("input"))
    previous_id = ctx.responses.previous_response_id
    previous = await store.load(previous_id) if previous_id else None
    if previous_id and previous is None:
        raise not_found(previous_id)
    ctx.items = (previous.items if previous is not None else []) + own
    ctx.chained = previous is not None
    metadata = ctx.native.get("metadata")
    named = isinstance(metadata, dict) and metadata.get("task_id") not in (None, "")
    if not (ctx.headers.get("x-task-id") or named):
        session = ctx.headers.get(SESSION_HEADER, "")
        if previous is not None and previous.task_id:
            ctx.headers["x-task-id"] = previous.task_id
        elif _SESSION_ID.fullmatch(session):  # Codex's session: one task per `codex exec`
            ctx.headers["x-task-id"] = session
        elif ctx.responses.store:  # the first call of a chain names the task it starts
            # Not `task-...`: that is the name of a request's own task (ledger: untasked).
            ctx.headers["x-task-id"] = f"chain-{ctx.request_id.removeprefix('req-')}"
    return previous


def decide_responses(ctx: ResponsesContext, config: GatewayConfig) -> None:
    """The route for the model alias, and the tier the client asked for."""
    assert ctx.responses is not None
    alias = ctx.responses.model
    route = config.models.get(alias)
    if route is None:
        usable = [name for name in config.models if may_use(ctx.principal, name)]
        raise ModelNotFoundError(
            f"model '{alias}' is not configured on this gateway "
            f"(available: {', '.join(sorted(usable)) or 'none'})",
            param="model",
        )
    ctx.alias, ctx.route = alias, route
    if route.model != alias:
        ctx.edits.set_fields["model"] = route.model
    tier = ctx.native.get("service_tier")
    ctx.tier_requested = ctx.headers.get("x-speed-tier") or (
        tier if isinstance(tier, str) else None
    )


def native_route(ctx: ResponsesContext) -> bool:
    """Whether the route takes /v1/responses itself (else it is translated to chat)."""
    return ctx.route is not None and not ctx.route.via_litellm and ctx.route.wire == "responses"


def _forwarded(ctx: ResponsesContext) -> tuple[dict[str, Any], Any]:
    """The Responses body as sent (parsed) and its edits, the expanded chain included."""
    edits = native_edits(ctx.edits, ctx.native)
    if ctx.chained:
        edits.set_fields["input"] = ctx.items
        edits.remove.add("previous_response_id")
    parsed = {k: v for k, v in ctx.native.items() if k not in edits.remove} | edits.set_fields
    return parsed, edits


def _echoed(ctx: ResponsesContext) -> dict[str, Any]:
    """The settings a translated Response echoes: as sent, with the client's chain id."""
    parsed, _ = _forwarded(ctx)
    return parsed | {"previous_response_id": ctx.native.get("previous_response_id")}


def _build_call(ctx: ResponsesContext, services: Services) -> UpstreamCall:
    """The native call (the client's bytes, patched) or the chat call it translates to."""
    assert ctx.alias is not None and ctx.route is not None
    parsed, edits = _forwarded(ctx)
    if native_route(ctx):
        body = ctx.raw_body
        if edits:
            body = patch_object(body, edits.set_fields, edits.remove, trusted=True)
    else:
        try:
            parsed = chat_edits_over(chat_body(parsed, ctx.items), ctx.edits)
        except ValueError as exc:
            raise InvalidRequestError(
                f"model '{ctx.alias}' is served over chat completions: {exc}", param="tools"
            ) from None
        parsed |= translated_fields(ctx)  # what the route's prefix actions rewrote
        body = orjson.dumps(parsed)
    call = services.upstreams.build_call(ctx.alias, ctx.route, body, parsed, ctx.stream)
    call.timeouts = route_timeouts(ctx, services)
    call.extra_headers = {**ctx.upstream_headers, **upstream_trace_headers()}
    return call


def _headers(ctx: ResponsesContext) -> dict[str, str]:
    headers = {"x-request-id": ctx.request_id}
    if ctx.task is not None and not ctx.task.implicit:
        headers["x-task-id"] = ctx.task.task_id
    headers["x-farebox-tier"] = ctx.tier_served or ctx.tier_planned or "standard"
    headers |= tier_headers(ctx)
    return safe_headers(headers | ctx.response_headers)


class _Sender:
    """One attempt, whole or streamed; keeps what it served for the chain."""

    def __init__(self, store: ResponseStore, pending: PendingPrefix) -> None:
        self._store = store
        self._pending = pending  # the prefix check, run in the upstream's shadow where it may

    async def keep(self, ctx: ResponsesContext, response: dict[str, Any]) -> None:
        """Keep a finished response for previous_response_id (unless `store: false`)."""
        response_id = response.get("id")
        output = response.get("output")
        if not ctx.responses or not ctx.responses.store or not isinstance(response_id, str):
            return
        assert ctx.task is not None
        items = (
            ctx.items + [i for i in output if isinstance(i, dict)]
            if isinstance(output, list)
            else ctx.items
        )
        if ctx.chained:  # as the client got it: with its own previous_response_id
            response = response | {"previous_response_id": ctx.native.get("previous_response_id")}
        usage = response.get("usage")
        if isinstance(usage, dict):  # and its `usage.cost` (`respond.with_cost`)
            response = response | {"usage": usage | {"cost": cost_object(ctx)}}
        scope = task_owner(ctx.principal, ctx.identity)
        kept = StoredResponse(
            items, ctx.task.task_id, ctx.identity.caller, scope, response, len(ctx.items)
        )
        await self._store.save(response_id, kept)

    async def complete(self, ctx: ResponsesContext, services: Services) -> Response:
        size = patch_size(len(ctx.raw_body))
        if on_loop(size):  # the usual body: built here, no coroutine for `sized`
            call = _build_call(ctx, services)
        else:
            call = await sized(size, _build_call, ctx, services)
        native = native_route(ctx)
        adapter = (
            ResponsesUpstream(services.upstreams.http)
            if native
            else services.upstreams.adapter(call.route)
        )
        meter = ResponsesMeter()
        pending = self._pending
        ctx.timings.upstream_sent = time.perf_counter()
        try:
            reply = await sent_with(pending, call, adapter, adapter.complete)
        except asyncio.CancelledError:  # the check ran (`sent_with`): the row has its outcome
            with Shield():
                await finish(ctx, meter.meter, services, cancelled=True)
            raise
        body = reply.body
        if native:
            meter.observe_response(reply.payload)
            response = reply.payload
            if ctx.chained:  # the upstream saw no chain; the client's id is echoed back
                echo = {"previous_response_id": ctx.native.get("previous_response_id")}
                body = patch_object(body, echo, set(), trusted=True)
        else:
            chat_meter = Meter()
            chat_meter.observe_reply(reply.payload)
            meter.meter = chat_meter
            sent = _echoed(ctx)
            response = response_from_chat(
                sent, reply.payload, chat_meter.usage or Usage(), new_id("resp")
            )
            body = orjson.dumps(response)
        await settle_or_book(pending, ctx, meter.meter, services)

        def kept() -> Awaitable[None]:  # before the reply: a next call may name it at once
            return self.keep(ctx, response)

        def whole() -> Response:
            priced = with_cost(response, body, ctx)  # usage.cost, as chat's replies carry
            headers = _headers(ctx) | cost_headers(ctx)
            return json_response(priced, reply.status, headers, sendable=True)

        return await book_after(ctx, meter.meter, services, whole, kept)

    async def stream(self, ctx: ResponsesContext, services: Services) -> Response:
        """Open the upstream stream and wait for its first event before answering."""
        size = patch_size(len(ctx.raw_body))
        if on_loop(size):  # the usual body: built here, no coroutine for `sized`
            call = _build_call(ctx, services)
        else:
            call = await sized(size, _build_call, ctx, services)
        native = native_route(ctx)
        adapter = (
            ResponsesUpstream(services.upstreams.http)
            if native
            else services.upstreams.adapter(call.route)
        )
        ctx.timings.upstream_sent = time.perf_counter()
        stream = await sent_with(self._pending, call, adapter, adapter.open_stream)
        await settle_or_book(self._pending, ctx, Meter(), services, stream)
        cap = None if native else thinking_cap_for(ctx, call, services)
        if cap is not None:  # cut on the chat stream, before it is told as Responses events
            stream = CappedStream(stream, cap)
        events = stream.events()
        first = await first_event(stream, events, call)
        relayed: Source
        if native:
            native_events: AsyncIterator[Relayed] = prepend(first, events)
            if ctx.thinking_cap is not None:  # no continuation natively: ended at the budget
                native_events = capped_native(native_events, stream, ctx.thinking_cap, ctx.body)
            if ctx.chained:
                native_events = _echo_chain(native_events, ctx.native.get("previous_response_id"))
            relayed = native_events
        else:
            sent = _echoed(ctx)
            teller = ChatToResponses(sent, new_id("resp"), int(time.time()))
            relayed = TranslatedResponses(first, events, teller, ctx.alias or "stream")

        async def on_done(response: dict[str, Any]) -> None:
            await self.keep(ctx, response)

        relay = ResponsesRelay(ctx, relayed, stream, services, on_done)
        return ResponsesRelayResponse(relay, headers=_headers(ctx))


_LIFECYCLE = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)


async def _echo_chain(
    events: AsyncIterator[Relayed], previous: Any
) -> AsyncGenerator[Relayed, None]:
    """The lifecycle events with the client's previous_response_id (the upstream saw none)."""
    async for event, _ in events:
        payload = event_payload(event, "upstream")
        if payload is not None and payload.get("type") in _LIFECYCLE:
            response = payload.get("response")
            if isinstance(response, dict):
                response["previous_response_id"] = previous
                event = sse(payload)
        yield event, payload


__all__ = ["handle_responses", "not_found"]
