"""The ledger's tables as SQLAlchemy 2 typed models, and the two column types money and time need.

SQLite has no exact decimal type: a NUMERIC column there turns `0.0000012345` into a
float, and SUM() adds floats. So on SQLite money is stored as an integer count of
1e-10 units (the precision of NUMERIC(20, 10)) and SQL sums stay exact; on PostgreSQL it
is a real NUMERIC(20, 10). Either way Python sees `Decimal`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    Index,
    Integer,
    Numeric,
    String,
    Table,
    Text,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from gateway.ledger.records import MONEY_QUANTUM, MONEY_SCALE, as_money


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


class Base(DeclarativeBase):
    """Declarative base of the ledger tables (the Alembic autogenerate target)."""


class RequestRow(Base):
    """One upstream call, as written by the ledger writer."""

    __tablename__ = "requests"
    __table_args__ = (
        Index("ix_requests_created_at", "created_at"),
        Index("ix_requests_task_id", "task_id"),
        Index("ix_requests_team_created_at", "team", "created_at"),
        Index("ix_requests_request_id", "request_id"),
    )

    id: Mapped[str] = mapped_column(String, primary_key=True)
    request_id: Mapped[str] = mapped_column(String)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    task_id: Mapped[str] = mapped_column(String)
    task_step: Mapped[str | None] = mapped_column(String)
    step_kind: Mapped[str | None] = mapped_column(String)
    team: Mapped[str] = mapped_column(String)
    project: Mapped[str] = mapped_column(String)
    caller: Mapped[str | None] = mapped_column(String)
    model_alias: Mapped[str] = mapped_column(String)
    backend: Mapped[str] = mapped_column(String)
    provider: Mapped[str] = mapped_column(String)
    upstream_model: Mapped[str] = mapped_column(String)
    tier_requested: Mapped[str] = mapped_column(String)
    tier_served: Mapped[str] = mapped_column(String)
    status_code: Mapped[int] = mapped_column(Integer)
    error_type: Mapped[str | None] = mapped_column(String)
    streamed: Mapped[bool]
    estimated: Mapped[bool]
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_1h_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_input: Mapped[Decimal] = mapped_column(Money)
    cost_cached: Mapped[Decimal] = mapped_column(Money)
    cost_cache_write: Mapped[Decimal] = mapped_column(Money)
    cost_output: Mapped[Decimal] = mapped_column(Money)
    cost_reasoning: Mapped[Decimal] = mapped_column(Money)
    cost_total: Mapped[Decimal] = mapped_column(Money)
    ttft_ms: Mapped[int | None] = mapped_column(BigInteger)
    ttfat_ms: Mapped[int | None] = mapped_column(BigInteger)
    duration_ms: Mapped[int] = mapped_column(BigInteger)
    decode_tps: Mapped[float | None] = mapped_column(Float)
    expected_cached_tokens: Mapped[int | None] = mapped_column(BigInteger)
    prefix_status: Mapped[str | None] = mapped_column(String)
    output_cap_clamped: Mapped[bool]
    # The upstream's usage was clamped to be billable; usage_reported keeps what it sent.
    usage_suspect: Mapped[bool] = mapped_column(server_default=false())
    usage_reported: Mapped[str | None] = mapped_column(Text)
    tier_confirmed: Mapped[bool | None] = mapped_column()
    prefix_lost_usd: Mapped[Decimal | None] = mapped_column(Money)
    thinking_enforcement: Mapped[str | None] = mapped_column(String)
    dropped_params: Mapped[str | None] = mapped_column(String)


class TaskRow(Base):
    """Running totals of one task (an agent run), kept up to date by the writer."""

    __tablename__ = "tasks"
    __table_args__ = (
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

    task_id: Mapped[str] = mapped_column(String, primary_key=True)
    # Nullable: a finish can reach the database before the task's first request does.
    team: Mapped[str | None] = mapped_column(String)
    project: Mapped[str | None] = mapped_column(String)
    status: Mapped[str] = mapped_column(String)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_activity_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    request_count: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_1h_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_input: Mapped[Decimal] = mapped_column(Money)
    cost_cached: Mapped[Decimal] = mapped_column(Money)
    cost_cache_write: Mapped[Decimal] = mapped_column(Money)
    cost_output: Mapped[Decimal] = mapped_column(Money)
    cost_reasoning: Mapped[Decimal] = mapped_column(Money)
    cost_total: Mapped[Decimal] = mapped_column(Money)
    first_ttft_ms: Mapped[int | None] = mapped_column(BigInteger)
    # The gateway's wrapper of one request sent without a task id (see queries.untasked_task).
    untasked: Mapped[bool] = mapped_column(server_default=false())


class RollupKey:
    """The key columns every rollup starts with: a UTC hour or day of one team's project
    (sorted first, before the family's own key columns; see gateway.ledger.rollup)."""

    bucket: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True, sort_order=-1)
    team: Mapped[str] = mapped_column(String, primary_key=True, sort_order=-1)
    project: Mapped[str] = mapped_column(String, primary_key=True, sort_order=-1)


class RollupSums(RollupKey):
    """The sums every rollup row carries, after its key columns."""

    request_count: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_1h_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_input: Mapped[Decimal] = mapped_column(Money)
    cost_cached: Mapped[Decimal] = mapped_column(Money)
    cost_cache_write: Mapped[Decimal] = mapped_column(Money)
    cost_output: Mapped[Decimal] = mapped_column(Money)
    cost_reasoning: Mapped[Decimal] = mapped_column(Money)
    cost_total: Mapped[Decimal] = mapped_column(Money)
    # Untasked requests counted at their first attempt, and the cost of all their attempts.
    untasked_requests: Mapped[int] = mapped_column(BigInteger)
    untasked_cost: Mapped[Decimal] = mapped_column(Money)


class RollupColumns(RollupSums):
    """A rollup row keyed by model, backend and served tier too."""

    model_alias: Mapped[str] = mapped_column(String, primary_key=True)
    backend: Mapped[str] = mapped_column(String, primary_key=True)
    tier_served: Mapped[str] = mapped_column(String, primary_key=True)


class StepRollupColumns(RollupSums):
    """A rollup row keyed by step and step kind too; a missing step or kind is stored as ''
    and a present one with a ':' prefix, so NULL stays apart from every value in a key."""

    task_step: Mapped[str] = mapped_column(String, primary_key=True)
    step_kind: Mapped[str] = mapped_column(String, primary_key=True)


class PrefixRollupColumns(RollupSums):
    """A rollup row keyed by model, served tier (migration 0008) and prefix verdict too
    (`hit`, `miss:<reason>`; none is '' and one ':' + it, as steps), with two more sums."""

    model_alias: Mapped[str] = mapped_column(String, primary_key=True)
    tier_served: Mapped[str] = mapped_column(String, primary_key=True)
    prefix_status: Mapped[str] = mapped_column(String, primary_key=True)
    # NULL summed as 0; after the common sums.
    expected_cached_tokens: Mapped[int] = mapped_column(BigInteger, sort_order=1)
    prefix_lost_usd: Mapped[Decimal] = mapped_column(Money, sort_order=1)


class HourlyRollupRow(RollupColumns, Base):
    """Request sums per UTC hour."""

    __tablename__ = "rollup_hourly"


class DailyRollupRow(RollupColumns, Base):
    """Request sums per UTC day."""

    __tablename__ = "rollup_daily"


class HourlyStepRollupRow(StepRollupColumns, Base):
    """Request sums per UTC hour by step."""

    __tablename__ = "rollup_steps_hourly"


class DailyStepRollupRow(StepRollupColumns, Base):
    """Request sums per UTC day by step."""

    __tablename__ = "rollup_steps_daily"


class HourlyPrefixRollupRow(PrefixRollupColumns, Base):
    """Request sums per UTC hour by prefix verdict."""

    __tablename__ = "rollup_prefix_hourly"


class DailyPrefixRollupRow(PrefixRollupColumns, Base):
    """Request sums per UTC day by prefix verdict."""

    __tablename__ = "rollup_prefix_daily"


class ApiKeyRow(Base):
    """A virtual key: its SHA-256, never its secret (see gateway.keys)."""

    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_secret_hash", "secret_hash", unique=True),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    prefix: Mapped[str] = mapped_column(String)
    secret_hash: Mapped[str] = mapped_column(String)
    attributes: Mapped[str] = mapped_column(Text)  # KeyAttributes as JSON
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    rotated_from: Mapped[str | None] = mapped_column(String)


class AuditRow(Base):
    """One admin action or policy reload: who, when, what, accepted or refused."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String)
    action: Mapped[str] = mapped_column(String)
    target: Mapped[str | None] = mapped_column(String)
    outcome: Mapped[str] = mapped_column(String)
    detail: Mapped[str | None] = mapped_column(Text)  # JSON
    content_hash: Mapped[str | None] = mapped_column(String)


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
    table: Table = TaskRow.__table__  # type: ignore[assignment]
    for index in table.indexes:
        include = POSTGRESQL_INCLUDE.get(str(index.name))
        if include is not None and index.dialect_kwargs.get("postgresql_include") is None:
            index.dialect_kwargs["postgresql_include"] = include
