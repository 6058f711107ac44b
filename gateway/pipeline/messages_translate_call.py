"""The Messages pipeline's upstream step for routes that speak chat completions.

`translate_context` runs right after the route is chosen: the Messages body becomes the
chat body the upstream will receive (`messages_translate.to_chat`), so every later stage
(entitlements, the policy's effort and thinking budget in the family's own field, the
prefix check, the quota hold) sees and edits what is really sent. The reply comes back as
an Anthropic message or event stream, metered from those (`MessagesMeter`, told the chat
usage's reasoning count, which Anthropic's usage has no field for), so the ledger books
the upstream's own usage; a whole reply's usage gains `cost`, as chat's does. A thinking
cap the policy enforces on the stream cuts the chat stream before it is translated
(`thinking_cap.CappedStream`), as chat's relay cuts it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import Response

from gateway.config import ModelRoute
from gateway.drain import Shield
from gateway.errors import InvalidRequestError
from gateway.otel.propagation import upstream_headers as upstream_trace_headers
from gateway.pipeline.chat import first_event, json_response, route_timeouts
from gateway.pipeline.event_relay import Relayed, next_read
from gateway.pipeline.finish import book_after, finish, settle_or_book
from gateway.pipeline.measure import Meter
from gateway.pipeline.messages_meter import MessagesMeter
from gateway.pipeline.messages_relay import MessagesRelay
from gateway.pipeline.messages_request import MessagesContext
from gateway.pipeline.messages_stream_translate import StreamTranslator, error_event
from gateway.pipeline.messages_translate import to_chat, to_message
from gateway.pipeline.prefix_pending import PendingPrefix, sent_with
from gateway.pipeline.quota import input_tokens
from gateway.pipeline.respond import with_cost
from gateway.pipeline.thinking_cap import CappedStream, thinking_cap_for
from gateway.services import Services
from gateway.tokens import count_tokens
from gateway.upstream.base import UpstreamCall, UpstreamStream
from gateway.upstream.sse import event_data
from gateway.usage import usage_from_openai

TRANSLATED_PROVIDER = "openai"
"""Routes whose wire is chat completions (vLLM, SGLang, OpenAI): translated."""


def translatable(route: ModelRoute | None) -> bool:
    return route is not None and route.provider == TRANSLATED_PROVIDER


def translate_context(ctx: MessagesContext) -> None:
    """Replace the Messages body with the chat body the route will receive."""
    assert ctx.route is not None
    chat = to_chat(ctx.body, ctx.route.wire_family)
    ctx.body = chat
    ctx.raw_body = orjson.dumps(chat)
    ctx.translated = True
    # `identify` rewrote `metadata` without Farebox's task fields: chat gets `user` instead.
    ctx.edits.set_fields.pop("metadata", None)
    ctx.edits.remove.discard("metadata")


def _stops(ctx: MessagesContext) -> list[str] | None:
    stops = ctx.body.get("stop")
    return [s for s in stops if isinstance(s, str)] if isinstance(stops, list) else None


def build_chat_call(ctx: MessagesContext, services: Services) -> UpstreamCall:
    """The chat call: the translated body with the stages' edits."""
    assert ctx.alias is not None and ctx.route is not None
    if not translatable(ctx.route):  # a fallback moved it to a route of another wire
        raise InvalidRequestError(
            f"model '{ctx.alias}' does not speak chat completions: a translated Messages "
            "request cannot fall back to it",
            param="model",
        )
    parsed = ctx.forwarded_body()
    body = orjson.dumps(parsed)
    call = services.upstreams.build_call(ctx.alias, ctx.route, body, parsed, ctx.stream)
    call.timeouts = route_timeouts(ctx, services)
    call.extra_headers = {**ctx.upstream_headers, **upstream_trace_headers()}
    return call


async def complete_translated(
    ctx: MessagesContext,
    services: Services,
    pending: PendingPrefix,
    headers: Callable[[dict[str, str]], dict[str, str]],
) -> Response:
    """A whole reply, as an Anthropic message, whose booking runs after its last byte;
    `headers` makes its headers from the upstream's, once it is priced (`messages._headers`).
    `pending`: the prefix check, run while the upstream reads the request where it may."""
    call = build_chat_call(ctx, services)
    adapter = services.upstreams.adapter(call.route)
    meter = MessagesMeter()
    ctx.timings.upstream_sent = time.perf_counter()
    try:
        reply = await sent_with(pending, call, adapter, adapter.complete)
    except asyncio.CancelledError:  # the check ran (`sent_with`): the row has its outcome
        with Shield():
            await finish(ctx, meter.meter, services, cancelled=True)
        raise
    assert ctx.alias is not None
    message = to_message(reply.payload, ctx.alias, _stops(ctx))
    meter.reasoning_tokens = _reasoning(reply.payload.get("usage"))
    meter.observe_message(message)
    await settle_or_book(pending, ctx, meter.meter, services)

    def whole() -> Response:
        body = with_cost(message, orjson.dumps(message), ctx)
        return json_response(body, reply.status, headers(reply.headers), sendable=True)

    return await book_after(ctx, meter.meter, services, whole)


async def open_translated(
    ctx: MessagesContext, services: Services, pending: PendingPrefix
) -> tuple[MessagesRelay, dict[str, str]]:
    """The upstream's chat stream as Anthropic events, relayed and metered as a native one.
    `pending`: the prefix check, run while the upstream reads the request where it may."""
    call = build_chat_call(ctx, services)
    assert ctx.alias is not None
    translator = StreamTranslator(ctx.alias, input_tokens(ctx), _stops(ctx))
    adapter = services.upstreams.adapter(call.route)
    ctx.timings.upstream_sent = time.perf_counter()
    stream: UpstreamStream = await sent_with(pending, call, adapter, adapter.open_stream)
    await settle_or_book(pending, ctx, Meter(), services, stream)
    cap = thinking_cap_for(ctx, call, services)
    if cap is not None:
        stream = CappedStream(stream, cap)
    meter = MessagesMeter()
    events = TranslatedEvents(stream.events(), translator, meter)
    await first_event(stream, events, call)  # within the first-token limit
    events.requeue_taken()  # relayed with the rest, its object and all
    return MessagesRelay(ctx, events, stream, services, meter), stream.headers


class TranslatedEvents:
    """A chat stream's events told as Anthropic events (none for keep-alives), ending at
    `[DONE]`; an in-band error ends it with an `error` event.

    `relayed_batch` tells every chat event one upstream read brought (`SseEvents.batch`;
    one event from any other source) at once, each Anthropic event with its object
    (`Told`): the relay meters those objects without parsing its own bytes back, and
    awaits once per read, not once per event. `anext` gives one event's bytes, for
    `first_event`; `requeue_taken` puts the event it gave back in front, with its object.
    `meter` is told the chat usage's reasoning count before `message_delta` reports it.
    """

    __slots__ = ("_chat", "_ended", "_meter", "_pending", "_taken", "_translator", "_unread")

    def __init__(
        self,
        chat: AsyncIterator[bytes],
        translator: StreamTranslator,
        meter: MessagesMeter | None = None,
    ) -> None:
        self._chat = chat
        self._translator = translator
        self._meter = meter
        self._pending: list[Relayed] = []
        self._unread: list[bytes] = []  # chat events read, not told yet
        self._taken: Relayed | None = None
        self._ended = False

    def __aiter__(self) -> TranslatedEvents:
        return self

    async def __anext__(self) -> bytes:
        """The next event's bytes, telling no more chat events than it takes: the first
        event goes out before the rest of its read is translated."""
        while not self._pending:
            if not self._unread:
                if self._ended:
                    raise StopAsyncIteration
                self._unread = await next_read(self._chat)
                if not self._unread:
                    self._ended = True
                    raise StopAsyncIteration
            self._tell(self._unread.pop(0), self._pending)
            if self._ended:
                self._unread = []
        self._taken = self._pending.pop(0)
        return self._taken[0]

    def requeue_taken(self) -> None:
        """The event `anext` gave last goes back in front, to be relayed with its object."""
        if self._taken is not None:
            self._pending.insert(0, self._taken)
            self._taken = None

    async def relayed_batch(self) -> list[Relayed]:
        """The Anthropic events told and not taken, else those of the next upstream read;
        [] at the end (or a cut)."""
        if self._pending:
            pending, self._pending = self._pending, []
            return pending
        while not self._ended:
            chat_events, self._unread = self._unread or await next_read(self._chat), []
            if not chat_events:  # the chat stream ended before [DONE]: the relay says so
                self._ended = True
                return []
            out: list[Relayed] = []
            for event in chat_events:
                self._tell(event, out)
                if self._ended:
                    break
            if out:
                return out
        return []

    def _tell(self, event: bytes, out: list[Relayed]) -> None:
        data = event_data(event)
        if data is None or not data.strip():
            return
        if data.strip() == b"[DONE]":
            out += self._translator.finish()
            self._ended = True
            return
        payload = _object(data)
        if payload is None or "error" in payload:
            out.append(error_event(payload or {"error": "a stream chunk that is not an object"}))
            self._ended = True
            return
        if self._meter is not None and isinstance(payload.get("usage"), dict):
            self._meter.reasoning_tokens = _reasoning(payload["usage"])
        out += self._translator.feed(payload)

    async def aclose(self) -> None:
        """Tell nothing more (the upstream stream itself is closed by the relay)."""
        self._ended = True
        self._pending = []


def _reasoning(usage: Any) -> int:
    """The reasoning tokens a chat usage reports (0 without one)."""
    return usage_from_openai(usage).reasoning_tokens if isinstance(usage, dict) else 0


def _object(data: bytes) -> dict[str, Any] | None:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def count_translated(body: dict[str, Any], route: ModelRoute) -> Response:
    """count_tokens for a chat route: the gateway's estimate (no chat server counts tokens).

    The translated prompt's messages and tools, tokenized with the gateway's tokenizer
    (cl100k_base) plus 4 tokens per message for the chat template.
    """
    chat = to_chat(body, route.wire_family)
    total = 0
    for message in chat["messages"]:
        content = message.get("content") or ""
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        total += 4 + count_tokens(text)
        if message.get("tool_calls"):
            total += count_tokens(orjson.dumps(message["tool_calls"]).decode())
    if chat.get("tools"):
        total += count_tokens(orjson.dumps(chat["tools"]).decode())
    return Response(orjson.dumps({"input_tokens": total}), media_type="application/json")


__all__ = [
    "complete_translated",
    "count_translated",
    "open_translated",
    "translatable",
    "translate_context",
]
