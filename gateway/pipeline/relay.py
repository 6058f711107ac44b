"""Relay an upstream stream to the client event by event, measuring as it passes.

Events go out as the upstream's own bytes. Two exceptions: the usage-only chunk is
dropped when the client did not ask for it (the gateway asked on its behalf), and a
failure mid-stream ends the stream with one error event and `[DONE]`, so no client is
left hanging.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio

from gateway.errors import FareboxError, UpstreamUnreachableError, stream_error_event
from gateway.pipeline.context import RequestContext
from gateway.pipeline.finish import finish, price_now
from gateway.pipeline.measure import Meter
from gateway.pipeline.respond import with_cost
from gateway.pipeline.thinking_cap import ThinkingCap, is_role_only
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.upstream.base import UpstreamStream
from gateway.upstream.sse import DONE, DONE_EVENT, event_data, event_json
from gateway.usage import usage_from_openai


def _is_usage_only(chunk: dict[str, Any]) -> bool:
    return bool(chunk.get("usage")) and not chunk.get("choices")


async def relay(
    ctx: RequestContext,
    first: bytes,
    events: AsyncIterator[bytes],
    stream: UpstreamStream,
    meter: Meter,
    services: Services,
    cap: ThinkingCap | None = None,
) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes; always close the upstream and record the request."""
    error: FareboxError | None = None
    cancelled = False
    try:
        saw_done = False
        pending: bytes | None = first
        while True:
            event = pending if pending is not None else await _next(events)
            pending = None
            if event is None:
                break
            if _is_done(event):
                saw_done = True
                yield event
                break
            chunk = event_json(event)
            if chunk is not None:
                if cap is not None and cap.cut and is_role_only(chunk):
                    continue  # the continuation's opening chunk: the client had one
                if cap is not None and cap.passes_budget(chunk):
                    meter.observe_chunk(chunk)
                    yield event
                    await _close(events)
                    await stream.aclose()
                    stream = await cap.continue_stream()
                    events = stream.events()
                    continue
                if cap is not None and cap.cut and _is_usage_only(chunk):
                    chunk, event = _combined_usage(chunk, event, cap)
                meter.observe_chunk(chunk)
                if _is_usage_only(chunk):
                    if not ctx.client_wants_usage_chunk:
                        continue
                    event = _usage_event_with_cost(ctx, chunk, event, meter, services)
            yield event
        if not saw_done:
            error = UpstreamUnreachableError(
                f"upstream {ctx.alias} ended the stream before it was complete"
            )
            yield stream_error_event(error)
    except FareboxError as exc:
        error = exc
        yield stream_error_event(exc)
    except (asyncio.CancelledError, GeneratorExit):
        cancelled = True
        raise
    finally:
        # A disconnect cancels this generator's scope; the clean-up and the booking of
        # what was already spent must still run to the end.
        with anyio.CancelScope(shield=True):
            await _close(events)
            await stream.aclose()
            await finish(ctx, meter, services, error=error, cancelled=cancelled)


def _combined_usage(
    chunk: dict[str, Any], event: bytes, cap: ThinkingCap
) -> tuple[dict[str, Any], bytes]:
    """The continuation's usage chunk, rewritten to cover both upstream calls."""
    data = event_data(event) or b"{}"
    usage = cap.combined(usage_from_openai(chunk["usage"])).to_openai()
    return {**chunk, "usage": usage}, b"data: " + patch_object(data, {"usage": usage}) + b"\n\n"


def _usage_event_with_cost(
    ctx: RequestContext, chunk: dict[str, Any], event: bytes, meter: Meter, services: Services
) -> bytes:
    """The usage chunk with `usage.cost` added; the data line is rebuilt, nothing else."""
    price_now(ctx, meter, services)
    data = event_data(event)
    if data is None:
        return event
    return b"data: " + with_cost(chunk, data, ctx) + b"\n\n"


async def _next(events: AsyncIterator[bytes]) -> bytes | None:
    try:
        return await events.__anext__()
    except StopAsyncIteration:
        return None


async def _close(events: AsyncIterator[bytes]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


def _is_done(event: bytes) -> bool:
    data = event_data(event)
    return data is not None and data.strip() == DONE


__all__ = ["DONE_EVENT", "relay"]
