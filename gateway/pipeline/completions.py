"""One `/v1/completions` or `/v1/embeddings` request, through the chat pipeline's stages.

    parse -> identify -> decide -> entitle -> claim task -> apply policy -> reserve quota
          -> call upstream -> measure -> price -> record (and settle)

The stages are the chat pipeline's own; what differs is the wire. The request is parsed
into a chat-shaped view for the stages (`completions_request`), sent to the route's
`{base_url}/completions` or `/embeddings` as the client's bytes with only the stages'
edits (`gateway.upstream.openai_paths`), and measured from the reply's `usage`. A completion
stream is relayed by the chat relay, its `text` chunks read as content deltas.

Only OpenAI-wire routes (vLLM, SGLang, OpenAI, the simulator) serve these APIs here; a
route reached through litellm is refused with a 400 that says so. The prefix check does
not run on this path (a completion has no message layout to fingerprint).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.responses import Response

from gateway.config import GatewayConfig, ModelRoute
from gateway.drain import Shield
from gateway.errors import InvalidRequestError, ModelNotFoundError
from gateway.http_headers import safe_headers
from gateway.otel.propagation import upstream_headers as upstream_trace_headers
from gateway.pipeline import quota
from gateway.pipeline.attempts import call_with_recovery
from gateway.pipeline.chat import first_event, json_response, route_timeouts
from gateway.pipeline.completions_request import CompletionsContext, native_edits, parse_kind
from gateway.pipeline.entitle import entitle, may_use
from gateway.pipeline.finish import book_after, finish
from gateway.pipeline.identify import identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.offload import on_loop, patch_size, sized
from gateway.pipeline.plan import plan_now, plan_task
from gateway.pipeline.relay import Relay, RelayResponse
from gateway.pipeline.respond import cost_headers, with_cost
from gateway.pipeline.tier_report import tier_headers
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.upstream.base import UpstreamCall
from gateway.upstream.openai_paths import COMPLETIONS, EMBEDDINGS, OpenAIPathUpstream

_CAPS = ("max_completion_tokens", "max_tokens")


async def handle_completions(ctx: CompletionsContext, services: Services) -> Response:
    """Run the pipeline for one completion or embeddings request (`ctx.kind`)."""
    services = services.for_request()
    if on_loop(len(ctx.raw_body)):  # the usual body: parsed here, no coroutine for `sized`
        parse_kind(ctx)
    else:
        await sized(len(ctx.raw_body), parse_kind, ctx)
    identify(ctx)
    decide_path(ctx, services.config)
    entitle(ctx)
    base_edits = ctx.edits.copy()
    # A named task's owner and pinned effort are shared state; most requests have neither.
    decision = plan_now(ctx, services) or await plan_task(ctx, services)
    after_policy(ctx)
    limits = quota.limits_of(ctx, services)  # most requests have none: nothing to await
    if limits:
        await quota.hold(ctx, services, limits)
    send = _stream if ctx.stream else _complete
    try:
        return await call_with_recovery(ctx, services, decision, base_edits, send)  # type: ignore[arg-type]
    except BaseException:
        with Shield():
            await quota.close(ctx, services)
        raise


def decide_path(ctx: CompletionsContext, config: GatewayConfig) -> None:
    """The route for the model alias (an OpenAI-wire one), and the tier asked for."""
    alias = ctx.native["model"]
    route = config.models.get(alias)
    if route is None:
        usable = [name for name in config.models if may_use(ctx.principal, name)]
        raise ModelNotFoundError(
            f"model '{alias}' is not configured on this gateway "
            f"(available: {', '.join(sorted(usable)) or 'none'})",
            param="model",
        )
    check_openai_wire(ctx, alias, route)
    ctx.alias, ctx.route = alias, route
    if route.model != alias:
        ctx.edits.set_fields["model"] = route.model
    tier = ctx.native.get("service_tier")
    ctx.tier_requested = ctx.headers.get("x-speed-tier") or (
        tier if isinstance(tier, str) else None
    )
    if ctx.stream and not ctx.client_wants_usage_chunk:
        # Usage is needed for metering; the relay hides the chunk from this client.
        options = ctx.native.get("stream_options")
        ctx.edits.set_fields["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
        }


def check_openai_wire(ctx: CompletionsContext, alias: str, route: ModelRoute) -> None:
    """Refuse a route reached through litellm: these APIs go to OpenAI-wire routes only."""
    if route.via_litellm:
        path = "/v1/completions" if ctx.kind == "completion" else "/v1/embeddings"
        raise InvalidRequestError(
            f"model '{alias}' is served through litellm (provider {route.provider}); "
            f"{path} reaches OpenAI-compatible routes only (provider: openai)",
            param="model",
        )


def after_policy(ctx: CompletionsContext) -> None:
    """The step kind is the API's unless the client named one; an embedding has no output."""
    assert ctx.task is not None
    if not ctx.headers.get("x-task-step-kind"):
        ctx.task.step_kind = ctx.kind
    if ctx.kind == "embedding":
        for cap in _CAPS:  # the policy's output caps mean nothing to an embedding
            ctx.edits.set_fields.pop(cap, None)


class CompletionMeter(Meter):
    """The chat meter, reading a completion's `text` as the message or delta content."""

    def observe_chunk(self, chunk: dict[str, Any]) -> None:
        Meter.observe_chunk(self, _as_chat(chunk, "delta"))

    def observe_reply(self, reply: dict[str, Any]) -> None:
        Meter.observe_reply(self, _as_chat(reply, "message"))


def _as_chat(payload: dict[str, Any], part: str) -> dict[str, Any]:
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return payload
    told = [
        {**choice, part: {"content": choice.get("text")}} if isinstance(choice, dict) else choice
        for choice in choices
    ]
    return {**payload, "choices": told}


def _build_call(ctx: CompletionsContext, services: Services) -> UpstreamCall:
    """The upstream call: the client's bytes, changed only where a stage asked."""
    assert ctx.alias is not None and ctx.route is not None
    after_policy(ctx)  # again: a fallback's replan infers a chat step kind
    check_openai_wire(ctx, ctx.alias, ctx.route)  # a fallback may have moved the request
    edits = native_edits(ctx.edits, ctx.native, ctx.kind)
    body = ctx.raw_body
    if edits:
        body = patch_object(body, edits.set_fields, edits.remove, trusted=True)
    parsed = {k: v for k, v in ctx.native.items() if k not in edits.remove} | edits.set_fields
    call = services.upstreams.build_call(ctx.alias, ctx.route, body, parsed, ctx.stream)
    call.timeouts = route_timeouts(ctx, services)
    call.extra_headers = {**ctx.upstream_headers, **upstream_trace_headers()}
    return call


def _adapter(ctx: CompletionsContext, services: Services) -> OpenAIPathUpstream:
    path = COMPLETIONS if ctx.kind == "completion" else EMBEDDINGS
    return OpenAIPathUpstream(services.upstreams.http, path)


def _headers(ctx: CompletionsContext) -> dict[str, str]:
    headers = {"x-request-id": ctx.request_id}
    if ctx.task is not None and not ctx.task.implicit:
        headers["x-task-id"] = ctx.task.task_id
    headers["x-farebox-tier"] = ctx.tier_served or ctx.tier_planned or "standard"
    headers |= tier_headers(ctx)
    return safe_headers(headers | ctx.response_headers)


async def _complete(ctx: CompletionsContext, services: Services) -> Response:
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    meter = CompletionMeter()
    ctx.timings.upstream_sent = time.perf_counter()
    try:
        reply = await _adapter(ctx, services).complete(call)
    except asyncio.CancelledError:
        with Shield():
            await finish(ctx, meter, services, cancelled=True)
        raise
    meter.observe_reply(reply.payload)

    def whole() -> Response:
        body = with_cost(reply.payload, reply.body, ctx)
        return json_response(body, reply.status, _headers(ctx) | cost_headers(ctx), sendable=True)

    return await book_after(ctx, meter, services, whole)


async def _stream(ctx: CompletionsContext, services: Services) -> Response:
    """Open the upstream stream and wait for its first event before answering."""
    size = patch_size(len(ctx.raw_body))
    if on_loop(size):  # the usual body: built here, no coroutine for `sized`
        call = _build_call(ctx, services)
    else:
        call = await sized(size, _build_call, ctx, services)
    meter = CompletionMeter()
    ctx.timings.upstream_sent = time.perf_counter()
    stream = await _adapter(ctx, services).open_stream(call)
    events = stream.events()
    first = await first_event(stream, events, call)
    relay = Relay(ctx, first, events, stream, meter, services)
    return RelayResponse(relay, headers=_headers(ctx))


__all__ = ["handle_completions"]
