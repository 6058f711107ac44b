"""What each stage of the pipeline learns about one request, carried to the next."""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gateway.auth.principal import OPEN, Principal
from gateway.config import ModelRoute
from gateway.pricing import CostBreakdown
from gateway.schemas.chat import ChatRequest
from gateway.usage import Usage

if TYPE_CHECKING:
    from gateway.pipeline.prefix import PrefixOutcome
    from gateway.pipeline.quota import QuotaHold
    from gateway.pipeline.record import BookedCost


@dataclass(slots=True)
class Identity:
    """Who is calling: a hashed key id (never the key), and the team and project."""

    caller: str | None = None
    team: str | None = None
    project: str | None = None


@dataclass(slots=True)
class TaskRef:
    """The task and step this request belongs to; `implicit` when it is a task of its own."""

    task_id: str
    step: str | None = None
    step_kind: str | None = None
    done: bool = False
    implicit: bool = True


@dataclass(slots=True)
class Timings:
    """Monotonic timestamps (seconds) of the request's milestones."""

    received: float = field(default_factory=time.perf_counter)
    upstream_sent: float | None = None
    first_token: float | None = None
    first_answer_token: float | None = None
    last_token: float | None = None
    finished: float | None = None

    def ms_since_sent(self, moment: float | None) -> float | None:
        """Milliseconds from sending upstream to `moment`."""
        if moment is None or self.upstream_sent is None:
            return None
        return (moment - self.upstream_sent) * 1000.0


@dataclass(slots=True)
class BodyEdits:
    """Top-level fields the gateway changes before forwarding; nothing else is touched."""

    set_fields: dict[str, Any] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.set_fields or self.remove)

    def copy(self) -> BodyEdits:
        """An independent copy (what `copy.deepcopy` gives, without its machinery for the
        strings and numbers most edits set: those are shared, as deepcopy shares them)."""
        fields = {
            name: value if type(value) in _ATOMIC else _copy_value(value)
            for name, value in self.set_fields.items()
        }
        return BodyEdits(fields, set(self.remove))


_ATOMIC = frozenset({str, int, float, bool, type(None)})
"""Types `copy.deepcopy` returns as they are (immutable, holding nothing)."""


def _copy_value(value: Any) -> Any:
    """`copy.deepcopy(value)`; a plain dict of atomic values (`stream_options`, set on
    every stream) is copied with `dict`, which gives the same independent dict."""
    if type(value) is dict and all(type(item) in _ATOMIC for item in value.values()):
        return dict(value)
    return copy.deepcopy(value)


@dataclass(slots=True)
class RequestContext:
    """The request as it moves through the pipeline."""

    raw_body: bytes
    headers: dict[str, str]
    request_id: str = field(default_factory=lambda: f"req-{uuid.uuid4().hex}")
    principal: Principal = OPEN  # who the auth middleware says is calling
    body: dict[str, Any] = field(default_factory=dict)
    request: ChatRequest | None = None
    identity: Identity = field(default_factory=Identity)
    task: TaskRef | None = None
    alias: str | None = None
    route: ModelRoute | None = None
    tier_requested: str | None = None  # what the client asked (X-Speed-Tier, service_tier, speed)
    tier_planned: str | None = None  # what the policy sent upstream
    tier_served: str | None = None  # what the upstream says it served (else the planned tier)
    tier_confirmed: bool | None = None  # whether the upstream said so
    dropped_params: str | None = None  # hint fields the adapter dropped (and says so)
    edits: BodyEdits = field(default_factory=BodyEdits)
    timings: Timings = field(default_factory=Timings)
    usage: Usage | None = None
    cost: CostBreakdown | None = None
    task_cost: Decimal | None = None
    booked: tuple[CostBreakdown | None, BookedCost] | None = None  # `cost` rounded (record)
    prefix: PrefixOutcome | None = None
    quota: QuotaHold | None = None  # the budget and rate-limit hold (pipeline.quota)
    upstream_headers: dict[str, str] = field(default_factory=dict)
    clamped: bool = False
    thinking_cap: int | None = None
    thinking_cap_closes: bool = False  # at the cap the stream ends, not continued
    attempt: int = 0
    status_code: int | None = None
    error_type: str | None = None
    response_headers: dict[str, str] = field(default_factory=dict)

    def forwarded_body(self) -> dict[str, Any]:
        """The parsed body as the upstream will receive it: the client's, with the edits."""
        remove = self.edits.remove
        body = (
            {k: v for k, v in self.body.items() if k not in remove} if remove else self.body.copy()
        )
        body.update(self.edits.set_fields)
        return body

    @property
    def stream(self) -> bool:
        return bool(self.request and self.request.stream)

    @property
    def client_wants_usage_chunk(self) -> bool:
        return bool(self.request and self.request.wants_usage_chunk)
