"""One Anthropic Messages request (`POST /v1/messages`), through the chat pipeline's stages.

    parse -> identify -> decide -> entitle -> claim task -> apply policy -> check prefix
          -> reserve quota -> call upstream -> measure -> price -> record (and settle)

The stages are the chat pipeline's own (`identify`, `entitle`, `claim_task`, the policy,
`quota`, `call_with_recovery`, `finish`); what differs is the wire: the request is parsed
as a Messages body, sent to the route natively (`gateway.upstream.anthropic_messages`, the
client's bytes with only the policy's edits and the upstream model name), and measured
from Anthropic's message object or events (`messages_meter`). The prefix check sees the
Messages layout through `messages_prefix` (observe and strict only).

Routes that speak chat completions (vLLM, SGLang, OpenAI) are translated
(`messages_translate_call`): the body becomes a chat body right after the route is chosen,
so every later stage sees what is sent; the reply comes back as Anthropic's.
"""

from __future__ import annotations

import asyncio
import re
import time
from functools import partial
from typing import Any

from starlette.responses import Response

from gateway.compact_patch import patch_rendered
from gateway.config import GatewayConfig, ModelRoute
from gateway.drain import Shield
from gateway.errors import (
    InvalidRequestError,
    ModelNotFoundError,
)
from gateway.http_headers import safe_headers
from gateway.otel.propagation import upstream_headers as upstream_trace_headers
from gateway.pipeline import quota
from gateway.pipeline.attempts import call_with_recovery
from gateway.pipeline.chat import first_event, json_response, route_timeouts
from gateway.pipeline.context import BodyEdits
from gateway.pipeline.entitle import check_model, entitle
from gateway.pipeline.event_relay import prepend
from gateway.pipeline.finish import book_after, finish, settle_or_book
from gateway.pipeline.identify import caller_id, identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.messages_meter import MessagesMeter
from gateway.pipeline.messages_prefix import start_messages_prefix
from gateway.pipeline.messages_relay import MessagesRelay, MessagesRelayResponse
from gateway.pipeline.messages_request import MessagesContext, parse_count, parse_messages
from gateway.pipeline.messages_translate_call import (
    complete_translated,
    count_translated,
    open_translated,
    translatable,
    translate_context,
)
from gateway.pipeline.offload import on_loop, patch_size, sized
from gateway.pipeline.plan import plan_now, plan_task
from gateway.pipeline.policy import capabilities
from gateway.pipeline.prefix import rule_for_route
from gateway.pipeline.prefix_pending import PendingPrefix, sent_with
from gateway.pipeline.respond import cost_headers, with_cost
from gateway.pipeline.tier_report import tier_headers
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.upstream.anthropic_messages import (
    COUNT_TOKENS,
    AnthropicMessagesUpstream,
    upstream_headers,
)
from gateway.upstream.base import UpstreamCall

SESSION_HEADER = "x-claude-code-session-id"
"""Claude Code's per-session id (a UUID), sent on every request: the task id by default."""
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
NATIVE_PROVIDER = "anthropic"
# litellm's input spellings the planner writes, and the Messages API's own for them.
_SERVICE_TIERS = {"default": "standard_only", "auto": "auto"}


async def handle_messages(ctx: MessagesContext, services: Services) -> Response:
    """Run the pipeline for one Messages request and return the response to send."""
    services = services.for_request()
    small = on_loop(len(ctx.raw_body))  # the usual body: no coroutine for `sized`
    if small:
        parse_messages(ctx)
    else:
        await sized(len(ctx.raw_body), parse_messages, ctx)  # megabytes parse beside the loop
    _session_as_task(ctx)
    identify(ctx)
    if ctx.identity.caller is None:  # open mode with `x-api-key`, as Anthropic clients send
        ctx.identity.caller = caller_id(ctx.headers.get("x-api-key"))
    decide_messages(ctx, services.config)
    if translatable(ctx.route):  # to chat: the body every later stage sees
        if small:
            translate_context(ctx)
        else:
            await sized(len(ctx.raw_body), translate_context, ctx)
    entitle(ctx)
    base_edits = ctx.edits.copy()
    # A named task's owner and pinned effort are shared state; most requests have neither.
    decision = plan_now(ctx, services) or await plan_task(ctx, services)
    if not ctx.translated:
        _check_native(ctx.alias, ctx.route)
    assert ctx.alias is not None
    rule = rule_for_route(ctx, capabilities(services.prices, services.config, ctx.alias))
    # Forwarded to Anthropic on a route that only observes, the check's CPU part runs
    # while the upstream reads the request (`start_messages_prefix`).
    pending = await start_messages_prefix(ctx, services.prefix_checker, services.state, rule)
    limits = quota.limits_of(ctx, services)  # most requests have none: nothing to await
    if limits:  # the check settles first: a refusal's reply carries its headers
        await quota.hold(ctx, services, limits, pending.settle)  # refused: not sent, nor booked
    send = partial(_stream if ctx.stream else _complete, pending=pending)
    try:
        return await call_with_recovery(ctx, services, decision, base_edits, send)
    except BaseException:
        pending.run_now()
        with Shield():
            await quota.close(ctx, services)
        raise


async def handle_count_tokens(ctx: MessagesContext, services: Services) -> Response:
    """Forward a token count to the route (free at Anthropic: no quota, no ledger row)."""
    services = services.for_request()
    ctx.body, request = await sized(len(ctx.raw_body), parse_count, ctx.raw_body)
    route = _route(services.config, request.model)
    if ctx.principal.key is not None:
        check_model(ctx.principal.key.attributes, request.model)
    if translatable(route):
        return await sized(len(ctx.raw_body), count_translated, ctx.body, route)
    _check_native(request.model, route)
    body = ctx.raw_body
    if route.model != request.model:
        body = await sized(len(body), patch_object, body, {"model": route.model}, set())
    call = services.upstreams.build_call(request.model, route, body, ctx.body, stream=False)
    call.extra_headers = upstream_headers(ctx.headers, {}, call.api_key)
    reply = await AnthropicMessagesUpstream(services.upstreams.http).complete(call, COUNT_TOKENS)
    return Response(reply.body, status_code=reply.status, media_type="application/json")


def _session_as_task(ctx: MessagesContext) -> None:
    """Claude Code's session id is the task when the client names none."""
    session = ctx.headers.get(SESSION_HEADER)
    metadata = ctx.body.get("metadata")
    named = isinstance(metadata, dict) and metadata.get("task_id") not in (None, "")
    given = ctx.headers.get("x-task-id") or named
    if session and not given and _SESSION_ID.fullmatch(session):
        ctx.headers["x-task-id"] = session


def _route(config: GatewayConfig, alias: str) -> ModelRoute:
    route = config.models.get(alias)
    if route is None:
        known = ", ".join(sorted(config.models)) or "none"
        raise ModelNotFoundError(
            f"model '{alias}' is not configured on this gateway (available: {known})",
            param="model",
        )
    return route


def decide_messages(ctx: MessagesContext, config: GatewayConfig) -> None:
    """The route for the model alias, and the tier the client asked for."""
    assert ctx.messages is not None
    alias = ctx.messages.model
    route = _route(config, alias)
    ctx.alias, ctx.route = alias, route
    if route.model != alias:
        ctx.edits.set_fields["model"] = route.model
    tier = ctx.body.get("service_tier") or ctx.body.get("speed")
    ctx.tier_requested = ctx.headers.get("x-speed-tier") or (
        tier if isinstance(tier, str) else None
    )


def _check_native(alias: str | None, route: ModelRoute | None) -> None:
    """Refuse a route that speaks neither the Messages API nor chat completions."""
    if route is not None and route.provider != NATIVE_PROVIDER:
        raise InvalidRequestError(
            f"model '{alias}' is served through litellm (provider {route.provider}); "
            "/v1/messages reaches Anthropic and OpenAI-wire routes only: call "
            "/v1/chat/completions for it",
            param="model",
        )


def native_edits(edits: BodyEdits, body: dict[str, Any]) -> BodyEdits:
    """The policy's edits in the Messages API's own fields.

    The planner writes litellm's input spellings for Anthropic routes: `reasoning_effort`
    (adaptive thinking) becomes `thinking {type: adaptive}` + `output_config.effort`,
    `service_tier: default` becomes `standard_only`, and chat's `stream_options` is not sent.
    """
    native = BodyEdits(dict(edits.set_fields), set(edits.remove))
    native.set_fields.pop("stream_options", None)  # chat's usage chunk; Messages always reports
    effort = native.set_fields.pop("reasoning_effort", None)
    native.remove.discard("reasoning_effort")
    if "reasoning_effort" in body:
        native.remove.add("reasoning_effort")
    if effort is not None:
        thinking = native.set_fields.get("thinking", body.get("thinking"))
        if not isinstance(thinking, dict) or thinking.get("type") != "adaptive":
            native.set_fields["thinking"] = {"type": "adaptive"}
            native.remove.discard("thinking")
        config = body.get("output_config")
        native.set_fields["output_config"] = {
            **(config if isinstance(config, dict) else {}),
            "effort": effort,
        }
    tier = native.set_fields.get("service_tier")
    if isinstance(tier, str):
        native.set_fields["service_tier"] = _SERVICE_TIERS.get(tier, tier)
    return native


def _build_call(ctx: MessagesContext, services: Services) -> UpstreamCall:
    """The upstream call: the client's bytes, changed only where a stage asked."""
    assert ctx.alias is not None and ctx.route is not None
    _check_native(ctx.alias, ctx.route)  # a fallback may have moved the request
    edits = native_edits(ctx.edits, ctx.body)
    body = ctx.raw_body
    if edits:  # the usual small body re-rendered or spliced natively, as chat's
        fast = patch_rendered(body, ctx.body, edits.set_fields, edits.remove)
        body = fast or patch_object(body, edits.set_fields, edits.remove, trusted=True)
    parsed = {k: v for k, v in ctx.body.items() if k not in edits.remove} | edits.set_fields
    call = services.upstreams.build_call(ctx.alias, ctx.route, body, parsed, ctx.stream)
    call.timeouts = route_timeouts(ctx, services)
    call.extra_headers = upstream_headers(ctx.headers, ctx.upstream_headers, call.api_key)
    call.extra_headers.update(upstream_trace_headers())  # a traceparent when tracing is on
    return call


def _headers(ctx: MessagesContext, upstream: dict[str, str]) -> dict[str, str]:
    headers = {"x-request-id": ctx.request_id}
    if "request-id" in upstream:  # Anthropic's own id, which the SDK exposes
        headers["request-id"] = upstream["request-id"]
    if ctx.task is not None and not ctx.task.implicit:
        headers["x-task-id"] = ctx.task.task_id
    headers["x-farebox-tier"] = ctx.tier_served or ctx.tier_planned or "standard"
    headers |= tier_headers(ctx)
    return safe_headers(headers | ctx.response_headers)


async def _complete(ctx: MessagesContext, services: Services, pending: PendingPrefix) -> Response:
    if ctx.translated:
        return await complete_translated(
            ctx, services, pending, lambda upstream: _headers(ctx, upstream) | cost_headers(ctx)
        )
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    adapter = AnthropicMessagesUpstream(services.upstreams.http)
    meter = MessagesMeter()
    ctx.timings.upstream_sent = time.perf_counter()
    try:
        reply = await sent_with(pending, call, adapter, adapter.complete)
    except asyncio.CancelledError:  # the check ran (`sent_with`): the row has its outcome
        with Shield():
            await finish(ctx, meter.meter, services, cancelled=True)
        raise
    meter.observe_message(reply.payload)
    await settle_or_book(pending, ctx, meter.meter, services)

    def whole() -> Response:
        headers = _headers(ctx, reply.headers) | cost_headers(ctx)
        body = with_cost(reply.payload, reply.body, ctx)  # usage.cost, as chat's replies carry
        return json_response(body, reply.status, headers, sendable=True)

    return await book_after(ctx, meter.meter, services, whole)


async def _stream(ctx: MessagesContext, services: Services, pending: PendingPrefix) -> Response:
    """Open the upstream stream and wait for its first event before answering."""
    if ctx.translated:
        translated, upstream = await open_translated(ctx, services, pending)
        return MessagesRelayResponse(translated, headers=_headers(ctx, upstream))
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    adapter = AnthropicMessagesUpstream(services.upstreams.http)
    ctx.timings.upstream_sent = time.perf_counter()
    stream = await sent_with(pending, call, adapter, adapter.open_stream)
    await settle_or_book(pending, ctx, Meter(), services, stream)
    events = stream.events()
    first = await first_event(stream, events, call)
    relay = MessagesRelay(ctx, prepend(first, events), stream, services)
    return MessagesRelayResponse(relay, headers=_headers(ctx, stream.headers))


__all__ = ["handle_count_tokens", "handle_messages"]
