"""The steps every inference request shares: log, authenticate, inject faults, deliver."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.sim.capacity import Seats, seated_events
from gateway.sim.faults import FaultSpec
from gateway.sim.records import RequestRecord
from gateway.sim.state import SimState
from gateway.sim.streaming import EventStream
from gateway.sim.timing import Pacer, Timing, unless_disconnected

# Not a real HTTP status: nginx's "client closed request", logged when nobody is left to answer.
CLIENT_CLOSED = 499


@dataclass(frozen=True)
class Dialect:
    """How one wire format authenticates and shapes its errors."""

    api: str
    credential: Callable[[Request], str | None]
    unauthorized: Callable[[], Response]
    error_body: Callable[[int, str], dict[str, Any]]
    # The names a request's service_tier answers to when matching faults.
    tier_names: Callable[[str | None], set[str | None]]


@dataclass
class Admission:
    """A request that passed intake: its log record, raw body and the fault it drew."""

    record: RequestRecord
    body: bytes
    fault: FaultSpec | None


class EarlyResponseError(Exception):
    """Carries a response that ends the request before the model is involved."""

    def __init__(self, response: Response) -> None:
        super().__init__("request answered during intake")
        self.response = response


def _peek(body: bytes) -> dict[str, Any]:
    """Decode the body leniently, just to see model, stream and tier for logging and faults."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def authorized(state: SimState, supplied: str | None) -> bool:
    """Return whether the supplied key opens the simulator (always, when none is configured)."""
    if state.config.api_key is None:
        return True
    expected = state.config.api_key.get_secret_value()
    return supplied is not None and hmac.compare_digest(supplied.encode(), expected.encode())


async def admit(request: Request, state: SimState, dialect: Dialect) -> Admission:
    """Log the request, check the key, then apply the first matching fault."""
    body = await request.body()
    record = state.log.open(request.method, request.url.path, request.scope["headers"], body)
    if not authorized(state, dialect.credential(request)):
        record.status = 401
        raise EarlyResponseError(dialect.unauthorized())
    data = _peek(body)
    record.model = data.get("model") if isinstance(data.get("model"), str) else None
    record.stream = data.get("stream") is True
    tier = data.get("service_tier")
    record.service_tier = tier if isinstance(tier, str) else None
    served = state.config.find_model(record.model, dialect.api)
    models = {record.model, served.name if served else None}
    tiers = dialect.tier_names(record.service_tier)
    fault = state.faults.take(request.url.path, models, tiers)
    if fault is not None:
        record.fault = True
        await _apply_fault(request, record, fault, dialect)
    return Admission(record, body, fault)


async def _apply_fault(
    request: Request, record: RequestRecord, fault: FaultSpec, dialect: Dialect
) -> None:
    """Sleep for the fault's delay, then answer with its error status if it has one."""
    if fault.delay_s and not await unless_disconnected(
        asyncio.sleep(fault.delay_s), request.receive
    ):
        record.cancelled = True
        record.status = CLIENT_CLOSED
        raise EarlyResponseError(Response(status_code=CLIENT_CLOSED))
    if not fault.is_error or fault.status is None:
        return
    record.status = fault.status
    if fault.body is None:
        message = f"Simulated fault: HTTP {fault.status} injected through /sim/faults."
        content = dialect.error_body(fault.status, message)
    else:
        content = fault.body
    if isinstance(content, str):
        response: Response = Response(content, fault.status, fault.headers, "text/plain")
    else:
        response = JSONResponse(content, fault.status, fault.headers)
    raise EarlyResponseError(response)


async def deliver(
    request: Request,
    admission: Admission,
    timing: Timing,
    headers: dict[str, str],
    events: AsyncGenerator[bytes, None] | None,
    body: Callable[[], dict[str, Any]],
) -> Response:
    """Stream the events, or wait out the planned time and send the body, noting disconnects."""
    record = admission.record
    seats: Seats = request.app.state.sim.seats
    tokens = record.prompt_tokens + timing.output_tokens  # the KV blocks it will hold
    if events is not None:
        drop = admission.fault.drop_after_chunks if admission.fault else None
        events = seated_events(seats, tokens, events, record)
        return EventStream(events, record, headers=headers, drop_after_chunks=drop)

    async def generate() -> None:
        async with seats.seat(tokens) as waited:
            record.queued_ms = waited
            await Pacer(timing).finish()  # paced from the moment it runs

    if not await unless_disconnected(generate(), request.receive):
        record.cancelled = True
        record.status = CLIENT_CLOSED
        return Response(status_code=CLIENT_CLOSED)
    record.completed = True
    return JSONResponse(body(), headers=headers)
