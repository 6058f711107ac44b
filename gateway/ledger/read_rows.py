"""What the ledger's reads return: plain rows, importable without SQLAlchemy.

`gateway.ledger.queries` builds them from the database; `farebox report --url` builds the
same rows from a gateway's JSON (gateway.commands.report_remote), and a command that never
opens the database should not load SQLAlchemy to name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from gateway.ledger.records import RequestRecord


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A task's aggregate row."""

    task_id: str
    team: str | None
    project: str | None
    status: str
    started_at: datetime
    last_activity_at: datetime
    finished_at: datetime | None
    request_count: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_input: Decimal
    cost_cached: Decimal
    cost_cache_write: Decimal
    cost_output: Decimal
    cost_reasoning: Decimal
    cost_total: Decimal
    first_ttft_ms: int | None


@dataclass(frozen=True, slots=True)
class TaskDetail:
    """A task's aggregates and each of its upstream calls, oldest first."""

    task: TaskSummary
    requests: list[RequestRecord]


@dataclass(frozen=True, slots=True)
class SpendRow:
    """Requests, tokens and cost of one group in a time window."""

    group: str | None
    request_count: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_input: Decimal
    cost_cached: Decimal
    cost_cache_write: Decimal
    cost_output: Decimal
    cost_reasoning: Decimal
    cost_total: Decimal


@dataclass(frozen=True, slots=True)
class TaskCostStats:
    """Cost per task of one group; percentiles are nearest-rank, so exact.

    `finished_tasks` counts the tasks the statistics cover: finished ones unless the
    caller chose other statuses. Shares are fractions rounded to `SHARE_QUANTUM`.
    """

    group: str | None
    finished_tasks: int
    cost_total: Decimal
    cost_p50: Decimal
    cost_p95: Decimal
    cost_max: Decimal
    output_share: Decimal
    reasoning_share: Decimal
    cache_write_share: Decimal


@dataclass(frozen=True, slots=True)
class TaskOutcomes:
    """How one group's work ended: finished tasks, abandoned tasks, untasked requests."""

    group: str | None
    finished_tasks: int
    finished_cost: Decimal
    abandoned_tasks: int
    abandoned_cost: Decimal
    untasked_requests: int
    untasked_cost: Decimal
