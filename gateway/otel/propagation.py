"""What the request path needs of tracing, without importing OpenTelemetry.

The trace middleware puts a `RequestTrace` in a context variable for the request it
wraps; `upstream_headers()` is the one call the pipeline makes per upstream attempt: with
no trace (tracing off) it returns an empty mapping after one context-variable read.
With a trace it draws the attempt span's id now, so the `traceparent` sent upstream
names the attempt span the observer records once the attempt ends.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_NONE: dict[str, str] = {}


@dataclass(slots=True)
class RequestTrace:
    """The trace of one request: ids, the attempts' span ids, and what they cost."""

    trace_id: int
    span_id: int  # the request span's
    sampled: bool
    pending_span_id: int | None = None  # drawn for the attempt being sent
    cost: Decimal = Decimal(0)
    last: Any = None  # the RequestContext of the last attempt observed
    attempts: int = 0


CURRENT: ContextVar[RequestTrace | None] = ContextVar("farebox_trace", default=None)


def upstream_headers() -> dict[str, str]:
    """The `traceparent` to send upstream for the next attempt, or nothing."""
    trace = CURRENT.get()
    if trace is None:
        return _NONE
    span_id = secrets.randbits(64) or 1
    trace.pending_span_id = span_id
    flags = "01" if trace.sampled else "00"
    return {"traceparent": f"00-{trace.trace_id:032x}-{span_id:016x}-{flags}"}
