"""The ledger's tables (SQLAlchemy Core `Table`s in `METADATA`), and the two column types
money and time need.

SQLite has no exact decimal type: a NUMERIC column there turns `0.0000012345` into a
float, and SUM() adds floats. So on SQLite money is stored as an integer count of
1e-10 units (the precision of NUMERIC(20, 10)) and SQL sums stay exact; on PostgreSQL it
is a real NUMERIC(20, 10). Either way Python sees `Decimal`.

The gateway reads and writes these tables through SQLAlchemy Core only (`REQUESTS`,
`TASKS`, ...). The ORM classes mapped onto them (`Base`, `RequestRow`, `TaskRow`, ...: the
Alembic autogenerate target's base, and what tests query with) live in
`gateway.ledger.orm` and are built on first use (`from gateway.ledger.models import
RequestRow` still works): declaring them mapped 12 classes and evaluated ~210 `Mapped[...]`
annotations in every gateway process before the port opened (~50 ms of CPU, measured for
issue 12's start-up), though no request uses the ORM.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from gateway.ledger.records import MONEY_QUANTUM, MONEY_SCALE, as_money

if TYPE_CHECKING:  # built on first use: see the module docstring and __getattr__ below
    from gateway.ledger.orm import (  # noqa: F401 (the names __getattr__ gives)
        ApiKeyRow,
        AuditRow,
        Base,
        DailyPrefixRollupRow,
        DailyRollupRow,
        DailyStepRollupRow,
        HourlyPrefixRollupRow,
        HourlyRollupRow,
        HourlyStepRollupRow,
        RequestRow,
        TaskRow,
    )


class Money(TypeDecorator[Decimal]):
    """NUMERIC(20, 10) on PostgreSQL, integer 1e-10 units on SQLite; Decimal in Python."""

    impl = Numeric(20, MONEY_SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """Pick the storage type: see the module docstring for why SQLite differs."""
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(20, MONEY_SCALE, asdecimal=True))

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> object:
        """Round to 10 places (half-even, on both databases alike) and encode."""
        if value is None:
            return None
        quantized = as_money(value, "money")
        return int(quantized.scaleb(MONEY_SCALE)) if dialect.name == "sqlite" else quantized

    def process_result_value(self, value: object, dialect: Dialect) -> Decimal | None:
        """Decode to a Decimal with 10 places."""
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-MONEY_SCALE)  # type: ignore[call-overload]
        return Decimal(value).quantize(MONEY_QUANTUM)  # type: ignore[arg-type]


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as an aware UTC datetime on every database."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store UTC; SQLite keeps no zone, so it gets the naive UTC wall time."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("ledger timestamps must be timezone-aware (UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return an aware UTC datetime."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


METADATA = MetaData()
"""Every ledger table (`Base.metadata` is this one)."""


def _required(name: str, kind: Any, **options: Any) -> Column[Any]:
    return Column(name, kind, nullable=False, **options)


def _optional(name: str, kind: Any) -> Column[Any]:
    return Column(name, kind, nullable=True)


def _key(name: str, kind: Any = String) -> Column[Any]:
    return Column(name, kind, primary_key=True)


_TOKENS = ("prompt", "cached", "cache_write", "cache_write_1h", "completion", "reasoning")
_COSTS = ("input", "cached", "cache_write", "output", "reasoning", "total")


def _token_and_cost_sums() -> list[Column[Any]]:
    """The tokens and costs of a request row, and their sums in a task or rollup row."""
    return [
        *(_required(f"{kind}_tokens", BigInteger) for kind in _TOKENS),
        *(_required(f"cost_{kind}", Money) for kind in _COSTS),
    ]


REQUESTS = Table(
    "requests",  # one upstream call, as written by the ledger writer
    METADATA,
    _key("id"),
    _required("request_id", String),
    _required("attempt", Integer, default=0),
    _required("created_at", UTCDateTime),
    _required("task_id", String),
    _optional("task_step", String),
    _optional("step_kind", String),
    _required("team", String),
    _required("project", String),
    _optional("caller", String),
    _required("model_alias", String),
    _required("backend", String),
    _required("provider", String),
    _required("upstream_model", String),
    _required("tier_requested", String),
    _required("tier_served", String),
    _required("status_code", Integer),
    _optional("error_type", String),
    _required("streamed", Boolean),
    _required("estimated", Boolean),
    *_token_and_cost_sums(),
    _optional("ttft_ms", BigInteger),
    _optional("ttfat_ms", BigInteger),
    _required("duration_ms", BigInteger),
    _optional("decode_tps", Float),
    _optional("expected_cached_tokens", BigInteger),
    _optional("prefix_status", String),
    _required("output_cap_clamped", Boolean),
    # The upstream's usage was clamped to be billable; usage_reported keeps what it sent.
    _required("usage_suspect", Boolean, server_default=false()),
    _optional("usage_reported", Text),
    _optional("tier_confirmed", Boolean),
    _optional("prefix_lost_usd", Money),
    _optional("thinking_enforcement", String),
    _optional("dropped_params", String),
    Index("ix_requests_created_at", "created_at"),
    Index("ix_requests_task_id", "task_id"),
    Index("ix_requests_team_created_at", "team", "created_at"),
    Index("ix_requests_request_id", "request_id"),
)

TASKS = Table(
    "tasks",  # running totals of one task (an agent run), kept up to date by the writer
    METADATA,
    _key("task_id"),
    # Nullable: a finish can reach the database before the task's first request does.
    _optional("team", String),
    _optional("project", String),
    _required("status", String),
    _required("started_at", UTCDateTime),
    _required("last_activity_at", UTCDateTime),
    _optional("finished_at", UTCDateTime),
    _required("request_count", BigInteger),
    *_token_and_cost_sums(),
    _optional("first_ttft_ms", BigInteger),
    # The gateway's wrapper of one request sent without a task id (see queries.untasked_task).
    _required("untasked", Boolean, server_default=false()),
    Index("ix_tasks_status_last_activity_at", "status", "last_activity_at"),
    Index("ix_tasks_team_finished_at", "team", "finished_at"),
    # Carries what the Grafana panel "Cost per finished task" reads (migration 0008).
    Index("ix_tasks_finished_at_cover", "finished_at"),
    # Exact percentiles by rank without a sort (migration 0006, gateway.ledger.ranked).
    Index("ix_tasks_team_cost", "team", "cost_total"),
    Index("ix_tasks_team_status_cost", "team", "status", "cost_total"),
    # The same by project (migration 0009).
    Index("ix_tasks_project_cost", "project", "cost_total"),
)  # their INCLUDE columns on PostgreSQL: POSTGRESQL_INCLUDE, below


def _rollup(name: str, keys: tuple[str, ...], *after: Column[Any]) -> Table:
    """A rollup table: a UTC hour or day of one team's project, then the family's own key
    columns (`keys`), then the sums every rollup row carries, then `after`
    (see gateway.ledger.rollup)."""
    return Table(
        name,
        METADATA,
        _key("bucket", UTCDateTime),
        _key("team"),
        _key("project"),
        *(_key(key) for key in keys),
        _required("request_count", BigInteger),
        *_token_and_cost_sums(),
        # Untasked requests counted at their first attempt, and the cost of all their attempts.
        _required("untasked_requests", BigInteger),
        _required("untasked_cost", Money),
        *after,
    )


# Request sums per UTC hour and day, keyed by model, backend and served tier too.
ROLLUP_HOURLY = _rollup("rollup_hourly", ("model_alias", "backend", "tier_served"))
ROLLUP_DAILY = _rollup("rollup_daily", ("model_alias", "backend", "tier_served"))
# By step and step kind: a missing step or kind is stored as '' and a present one with a
# ':' prefix, so NULL stays apart from every value in a key.
ROLLUP_STEPS_HOURLY = _rollup("rollup_steps_hourly", ("task_step", "step_kind"))
ROLLUP_STEPS_DAILY = _rollup("rollup_steps_daily", ("task_step", "step_kind"))
# By served tier (migration 0008) and prefix verdict (`hit`, `miss:<reason>`; none is ''
# and one ':' + it, as steps), with two more sums (NULL summed as 0) after the common ones.
_PREFIX_KEYS = ("model_alias", "tier_served", "prefix_status")


def _prefix_sums() -> tuple[Column[Any], Column[Any]]:
    return _required("expected_cached_tokens", BigInteger), _required("prefix_lost_usd", Money)


ROLLUP_PREFIX_HOURLY = _rollup("rollup_prefix_hourly", _PREFIX_KEYS, *_prefix_sums())
ROLLUP_PREFIX_DAILY = _rollup("rollup_prefix_daily", _PREFIX_KEYS, *_prefix_sums())

API_KEYS = Table(
    "api_keys",  # a virtual key: its SHA-256, never its secret (see gateway.keys)
    METADATA,
    _key("id"),
    _required("prefix", String),
    _required("secret_hash", String),
    _required("attributes", Text),  # KeyAttributes as JSON
    _required("created_at", UTCDateTime),
    _required("updated_at", UTCDateTime),
    _optional("revoked_at", UTCDateTime),
    _optional("expires_at", UTCDateTime),
    _optional("rotated_from", String),
    Index("ix_api_keys_secret_hash", "secret_hash", unique=True),
)

AUDIT_LOG = Table(
    "audit_log",  # one admin action or policy reload: who, when, what, accepted or refused
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _required("at", UTCDateTime),
    _required("actor", String),
    _required("action", String),
    _optional("target", String),
    _required("outcome", String),
    _optional("detail", Text),  # JSON
    _optional("content_hash", String),
    Index("ix_audit_log_at", "at"),
)

_ORM_NAMES = frozenset(
    (
        "Base",
        "RequestRow",
        "TaskRow",
        "HourlyRollupRow",
        "DailyRollupRow",
        "HourlyStepRollupRow",
        "DailyStepRollupRow",
        "HourlyPrefixRollupRow",
        "DailyPrefixRollupRow",
        "ApiKeyRow",
        "AuditRow",
    )
)


def __getattr__(name: str) -> Any:
    """The ORM classes, mapped onto the tables above on first use (`gateway.ledger.orm`)."""
    if name in _ORM_NAMES:
        from gateway.ledger import orm

        return getattr(orm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The covering indexes' INCLUDE columns on PostgreSQL (`postgresql_include`). Given to
# `Index()` they would load SQLAlchemy's PostgreSQL dialect, all its drivers' modules (2 MiB,
# 50-140 ms of CPU), wherever this module is imported, a SQLite ledger's gateway included:
# `with_postgresql_options()` adds them where PostgreSQL is used (its engine, a migration).
POSTGRESQL_INCLUDE: dict[str, list[str]] = {
    "ix_tasks_finished_at_cover": ["team", "status", "cost_total"],
    "ix_tasks_team_cost": ["status", "finished_at", "request_count", "untasked"],
    "ix_tasks_team_status_cost": ["finished_at", "request_count", "untasked"],
    "ix_tasks_project_cost": ["status", "finished_at", "request_count", "untasked"],
}


def with_postgresql_options() -> None:
    """Give the models' indexes their PostgreSQL options (idempotent; loads the dialect)."""
    for index in TASKS.indexes:
        include = POSTGRESQL_INCLUDE.get(str(index.name))
        if include is not None and index.dialect_kwargs.get("postgresql_include") is None:
            index.dialect_kwargs["postgresql_include"] = include
