"""Which ledger rows a read may see, as SQL conditions the queries add to their WHERE.

A `ReadScope` is decided once per request from who is asking (see `gateway.api.read_scope`)
and then applied inside every query, so a row outside it is never read, let alone summed:
filtering after the fact would let a forgotten branch leak another team's numbers.

`team` and `project` match the columns of both tables. `caller` (a virtual key's id) is a
column of `requests` only: a task is the caller's when one of its requests is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, true

from gateway.ledger.store import REQUESTS, TASKS


@dataclass(frozen=True, slots=True)
class ReadScope:
    """Rows of this team, project and caller; a field left None does not narrow."""

    team: str | None = None
    project: str | None = None
    caller: str | None = None


EVERYTHING = ReadScope()


def request_rows(scope: ReadScope, table: Any = REQUESTS) -> ColumnElement[bool]:
    """The condition a `requests` row (of `table`, an alias of it) must meet."""
    conditions = [
        table.c[name] == value
        for name, value in (("team", scope.team), ("project", scope.project),
                            ("caller", scope.caller))
        if value is not None
    ]  # fmt: skip
    return _all(conditions)


def task_rows(scope: ReadScope) -> ColumnElement[bool]:
    """The condition a `tasks` row must meet; by caller: one of its requests is the caller's."""
    conditions: list[ColumnElement[bool]] = []
    if scope.team is not None:
        conditions.append(TASKS.c.team == scope.team)
    if scope.project is not None:
        conditions.append(TASKS.c.project == scope.project)
    if scope.caller is not None:
        mine = REQUESTS.alias("mine")
        conditions.append(
            exists().where(mine.c.task_id == TASKS.c.task_id, mine.c.caller == scope.caller)
        )
    return _all(conditions)


def _all(conditions: list[ColumnElement[bool]]) -> ColumnElement[bool]:
    return and_(*conditions) if conditions else true()
