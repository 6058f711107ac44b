"""The ORM classes of the ledger's tables: the Alembic autogenerate target's `Base`, and
what tests and ad-hoc scripts query with (`select(RequestRow).where(...)`).

Each class is mapped onto its Core table in `gateway.ledger.models`, which the gateway
itself reads and writes through (`models.REQUESTS`, ...); this module is imported only
where a class is first asked for (`gateway.ledger.models.__getattr__`), so code that uses
the tables alone maps none of them (~50 ms of CPU at import: the ORM's declarative scan).
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import FromClause
from sqlalchemy.orm import DeclarativeBase

from gateway.ledger import models


class Base(DeclarativeBase):
    """Declarative base of the ledger tables (the Alembic autogenerate target)."""

    metadata = models.METADATA


class RequestRow(Base):
    """One upstream call, as written by the ledger writer."""

    __table__: ClassVar[FromClause] = models.REQUESTS


class TaskRow(Base):
    """Running totals of one task (an agent run), kept up to date by the writer."""

    __table__: ClassVar[FromClause] = models.TASKS


class HourlyRollupRow(Base):
    """Request sums per UTC hour."""

    __table__: ClassVar[FromClause] = models.ROLLUP_HOURLY


class DailyRollupRow(Base):
    """Request sums per UTC day."""

    __table__: ClassVar[FromClause] = models.ROLLUP_DAILY


class HourlyStepRollupRow(Base):
    """Request sums per UTC hour by step."""

    __table__: ClassVar[FromClause] = models.ROLLUP_STEPS_HOURLY


class DailyStepRollupRow(Base):
    """Request sums per UTC day by step."""

    __table__: ClassVar[FromClause] = models.ROLLUP_STEPS_DAILY


class HourlyPrefixRollupRow(Base):
    """Request sums per UTC hour by prefix verdict."""

    __table__: ClassVar[FromClause] = models.ROLLUP_PREFIX_HOURLY


class DailyPrefixRollupRow(Base):
    """Request sums per UTC day by prefix verdict."""

    __table__: ClassVar[FromClause] = models.ROLLUP_PREFIX_DAILY


class ApiKeyRow(Base):
    """A virtual key: its SHA-256, never its secret (see gateway.keys)."""

    __table__: ClassVar[FromClause] = models.API_KEYS


class AuditRow(Base):
    """One admin action or policy reload: who, when, what, accepted or refused."""

    __table__: ClassVar[FromClause] = models.AUDIT_LOG
