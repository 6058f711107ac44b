"""What the request path hands the ledger: plain frozen records, JSON-safe for the spool.

The records need no SQLAlchemy to build, so the pipeline can create them without
touching the database layer. JSON form: Decimals as strings and datetimes as ISO 8601,
so a record read back from the spool equals the one written, to the last digit.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, make_dataclass, replace
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from gateway.usage import TOKEN_FIELDS as TOKEN_FIELDS  # re-exported: the ledger's token columns
from gateway.usage import Usage

COST_FIELDS = (
    "cost_input",
    "cost_cached",
    "cost_cache_write",
    "cost_output",
    "cost_reasoning",
    "cost_total",
)
# Ten decimal places, the precision the database keeps (NUMERIC(20, 10)).
MONEY_SCALE = 10
MONEY_QUANTUM = Decimal(1).scaleb(-MONEY_SCALE)
# No single amount reaches $100M: SQLite keeps money as int64 units of 1e-10 (at most
# ~$922M) and NUMERIC(20, 10) at most $10bn, so task sums of such amounts still fit.
MONEY_LIMIT = Decimal(100_000_000)
ZERO = Decimal(0)  # the cost fields' default, recognised by identity in `as_money`
ZERO_MONEY = ZERO.quantize(MONEY_QUANTUM)
OPEN = "open"
ABANDONED = "abandoned"
UNTASKED = "untasked"  # the status of a request without a task id, from its first row
MAX_OUTCOME_LENGTH = 64


money_text: Callable[[Decimal], str] = Decimal.__str__
"""orjson's fallback for what it cannot encode natively: a Decimal, as `to_json` writes it.

The C method itself, not a Python function calling it (six or seven calls a row): it
raises TypeError for anything but a Decimal, which orjson reports as not serializable."""


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


def new_row_id() -> str:
    """Return a fresh row id; it is what makes spool replays idempotent.

    A version 4 UUID as `str(uuid.uuid4())` writes it: the process's random first 80 bits
    (`_ROW_PREFIX`: 74 random, the version and the variant; drawn again in a forked
    worker), then a 48-bit count. Unique across processes as random UUIDs are (n
    processes share a prefix with odds of about n² in 2^75), and within one by the count
    (`next` on an `itertools.count` is one C call under the interpreter lock, so threads
    never draw the same number).

    It was `os.urandom(16)` per row: a `getrandom` system call that lets go of the
    interpreter lock, so the loop thread waited to take it back from the ledger's and
    the server's threads (py-spy put 2.3% of the c=64 profile on this line), and a random
    key lands each insert on a random page of the primary key's index.
    """
    return f"{_ROW_PREFIX}{next(_ROW_COUNT):012x}"


def _new_prefix() -> None:
    """Draw this process's id prefix (at import, and in a forked child)."""
    global _ROW_PREFIX, _ROW_COUNT
    h = os.urandom(10).hex()
    variant = "89ab"[int(h[16], 16) & 3]  # RFC 4122: 10xx
    _ROW_PREFIX = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-"
    _ROW_COUNT = itertools.count()


_ROW_PREFIX = ""
_ROW_COUNT = itertools.count()
_new_prefix()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_prefix)


def as_utc(value: datetime, name: str) -> datetime:
    """Return `value` in UTC, refusing naive datetimes, whose zone would be a guess."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (use datetime.now(UTC))")
    return value.astimezone(UTC)


def as_money(value: object, name: str) -> Decimal:
    """Return `value` as a Decimal of 10 places (half-even), refusing floats, which are inexact.

    Rounding here, once, makes every stored row and every task total agree to the digit:
    a task's cost is exactly the sum of its rows' costs.
    """
    if value is ZERO:  # a field left at its default: nothing to check or round
        return ZERO_MONEY
    if type(value) is Decimal:  # the usual case, without the generic checks and copy
        amount = value
    elif isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise TypeError(
            f"{name} must be a Decimal (got {type(value).__name__}); money is never float"
        )
    else:
        amount = Decimal(value)
    if not amount.is_finite() or abs(amount) >= MONEY_LIMIT:
        raise ValueError(
            f"{name} {amount} is out of range: the ledger books amounts under {MONEY_LIMIT} USD"
            " (is a price in the configuration per token instead of per million?)"
        )
    return amount.quantize(MONEY_QUANTUM, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One upstream call; retries and fallbacks of a request are separate records."""

    request_id: str
    task_id: str
    team: str
    project: str
    model_alias: str
    backend: str = ""
    provider: str = ""
    upstream_model: str = ""
    tier_requested: str = ""
    tier_served: str = ""
    status_code: int = 200
    attempt: int = 0
    task_step: str | None = None
    step_kind: str | None = None
    caller: str | None = None
    error_type: str | None = None
    streamed: bool = False
    estimated: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost_input: Decimal = ZERO
    cost_cached: Decimal = ZERO
    cost_cache_write: Decimal = ZERO
    cost_output: Decimal = ZERO
    cost_reasoning: Decimal = ZERO
    cost_total: Decimal = ZERO
    ttft_ms: int | None = None
    ttfat_ms: int | None = None
    duration_ms: int = 0
    decode_tps: float | None = None
    expected_cached_tokens: int | None = None
    prefix_status: str | None = None
    output_cap_clamped: bool = False
    usage_suspect: bool = False
    usage_reported: str | None = None
    tier_confirmed: bool | None = None  # did the upstream say which tier it served
    prefix_lost_usd: Decimal | None = None  # what a prefix break cost against the forecast
    thinking_enforcement: str | None = None  # backend | stream | hint
    dropped_params: str | None = None  # hint fields the backend could not take, dropped
    id: str = field(default_factory=new_row_id)
    created_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        # Frozen dataclass: normalising in place needs object.__setattr__.
        object.__setattr__(self, "created_at", as_utc(self.created_at, "created_at"))
        for name in COST_FIELDS:
            object.__setattr__(self, name, as_money(getattr(self, name), name))
        if self.prefix_lost_usd is not None:
            object.__setattr__(
                self, "prefix_lost_usd", as_money(self.prefix_lost_usd, "prefix_lost_usd")
            )

    def with_usage(self, usage: Usage) -> RequestRecord:
        """Return a copy carrying the token counts and flags of `usage`."""
        return replace(
            self,
            **usage.token_counts(),
            estimated=usage.estimated,
            usage_suspect=usage.suspect,
            usage_reported=usage.reported,
        )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-safe dict (Decimals as strings, datetimes as ISO 8601)."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in COST_FIELDS:
            data[name] = str(data[name])
        if self.prefix_lost_usd is not None:
            data["prefix_lost_usd"] = str(self.prefix_lost_usd)
        data["created_at"] = self.created_at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        """Rebuild a record from `to_json` output; unknown keys from other versions are ignored."""
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        for name in COST_FIELDS:
            if name in values:
                values[name] = Decimal(values[name])
        if values.get("prefix_lost_usd") is not None:
            values["prefix_lost_usd"] = Decimal(values["prefix_lost_usd"])
        values["created_at"] = datetime.fromisoformat(values["created_at"])
        return cls(**values)


def _rounded_post_init(self: Any) -> None:
    """Check the time and the prefix loss (not the costs: see `RoundedRecord`), then seal."""
    self.created_at = as_utc(self.created_at, "created_at")
    if self.prefix_lost_usd is not None:
        self.prefix_lost_usd = as_money(self.prefix_lost_usd, "prefix_lost_usd")
    self.__class__ = RequestRecord  # the same slots: frozen from here on


def _rounded_class() -> type[RequestRecord]:
    """A mutable twin of `RequestRecord`: the same fields, slots and defaults."""
    specs: list[tuple[str, Any, Any]] = []
    for spec in fields(RequestRecord):
        if spec.default_factory is not MISSING:
            specs.append((spec.name, spec.type, field(default_factory=spec.default_factory)))
        elif spec.name in COST_FIELDS:  # the default as `as_money` rounds it
            specs.append((spec.name, spec.type, field(default=ZERO_MONEY)))
        elif spec.default is not MISSING:
            specs.append((spec.name, spec.type, field(default=spec.default)))
        else:
            specs.append((spec.name, spec.type, field()))
    namespace = {"__post_init__": _rounded_post_init, "__module__": __name__}
    made: type[RequestRecord] = make_dataclass(
        "RoundedRecord", specs, namespace=namespace, slots=True, eq=False
    )
    return made


RoundedRecord = _rounded_class()
"""`RequestRecord(...)` for costs already rounded: what `as_money` returns for each, as
`BookedCost.of` (gateway/pipeline/record.py) books them. It returns a `RequestRecord`,
equal to the one the class itself builds from the same values, and as frozen.

A frozen dataclass sets each of its 47 fields through `object.__setattr__`, and
`RequestRecord.__post_init__` rounds six amounts that are rounded already: ~7 and ~4 us
of the ~12 us a request's row took. This twin is a plain slotted dataclass (a field set
is one store) whose `__post_init__` checks what the pipeline does not (the time's zone,
the prefix loss) and then gives the object `RequestRecord`'s class, whose slots are the
same (a documented `__class__` assignment: same layout, no copy).
"""


def open_row() -> Any:
    """A `RoundedRecord` with only its id and time set, to be filled a store per field
    (every other field of `RequestRecord`, without exception) and then `seal_row`ed.

    What `RoundedRecord(**fields)` builds, without its call: matching 47 keywords to the
    `__init__`'s parameters was most of a row's ~7-9 µs (the stores ~1.5). A field left
    unset is missing from the row (AttributeError on first read, in its spool line at
    the latest): tests/unit/test_ledger_record_build.py reads every field of the rows
    `gateway.pipeline.record.ledger_record` builds this way.
    """
    row: Any = _NEW_ROW(RoundedRecord)
    row.id = new_row_id()
    row.created_at = utcnow()
    return row


_NEW_ROW = object.__new__


def seal_row(row: Any, rounded: bool) -> RequestRecord:
    """An `open_row` filled in, frozen as the `RequestRecord` the constructor builds from
    the same values: its costs rounded as `as_money` rounds them unless `rounded` (they
    are `as_money`'s already, as `BookedCost.of` books them), the time's zone and the
    prefix loss checked."""
    if not rounded:
        for name in COST_FIELDS:
            setattr(row, name, as_money(getattr(row, name), name))
    _rounded_post_init(row)
    sealed: RequestRecord = row
    return sealed


@dataclass(frozen=True, slots=True)
class TaskFinish:
    """A client's statement that a task ended, with its outcome (`success`, `failed`, ...)."""

    task_id: str
    outcome: str
    at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", as_utc(self.at, "at"))
        if not self.outcome or self.outcome == OPEN or len(self.outcome) > MAX_OUTCOME_LENGTH:
            raise ValueError(
                f"task outcome {self.outcome!r} is invalid: use a non-empty word other than "
                f"'open', at most {MAX_OUTCOME_LENGTH} characters (e.g. 'success', 'failed')"
            )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {"task_id": self.task_id, "outcome": self.outcome, "at": self.at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskFinish:
        """Rebuild a finish event from `to_json` output."""
        return cls(data["task_id"], data["outcome"], datetime.fromisoformat(data["at"]))


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """A task that left the `open` state: what the cost-per-task histogram observes."""

    task_id: str
    team: str
    outcome: str
    cost_total: Decimal


LedgerEntry = RequestRecord | TaskFinish
