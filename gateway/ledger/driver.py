"""The flush's hot statements, compiled once to the driver's SQL and run with tuples.

`connection.execute(statement, list_of_dicts)` costs SQLAlchemy a compiled-cache lookup,
an execution context, a dict walk per row through the bind processors and, for an
INSERT ... RETURNING of many rows, "insertmanyvalues" rendering the statement again per
batch. The ledger's flush runs the same few statements on every batch, so here each is
compiled once per dialect and parameter set, by SQLAlchemy itself (the same SQL text, bind
casts and bind processors, so the same stored values), and run with
`exec_driver_sql(sql, tuples)`.

The request insert on SQLite goes further: the records are already validated (UTC
datetimes, money quantized to 10 places, by `RequestRecord.__post_init__`), so each row's
tuple is the record's fields with the money and the timestamp encoded as the `Money` and
`UTCDateTime` types of models.py encode them on SQLite (integer 1e-10 units; naive UTC
text with microseconds); several rows go in one multi-row `VALUES ... RETURNING id`
(Python's sqlite3 `executemany` returns no rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.ledger.records import MONEY_SCALE

Processor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One statement as the driver takes it: SQL text, parameter order, value encoders."""

    sql: str
    names: tuple[str, ...]
    converted: tuple[tuple[int, Processor], ...]  # (position, bind processor)

    def tuples(self, rows: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """Each row's values in parameter order, encoded as SQLAlchemy would bind them."""
        names = self.names
        get = itemgetter(*names) if len(names) > 1 else (lambda row: (row[names[0]],))
        converted = self.converted
        out: list[tuple[Any, ...]] = []
        for row in rows:
            values = list(get(row))
            for position, process in converted:
                values[position] = process(values[position])
            out.append(tuple(values))
        return out

    async def executemany(self, connection: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Run the statement once per row (the driver's executemany), no rows returned."""
        await connection.exec_driver_sql(self.sql, self.tuples(rows))


_prepared: dict[tuple[Any, ...], Prepared] = {}


def prepare(dialect: Dialect, statement: Any, keys: Sequence[str]) -> Prepared:
    """Compile `statement` for `dialect` with these parameter keys, once, and keep it."""
    cache_key = (dialect.name, dialect.driver, dialect.paramstyle, statement, tuple(keys))
    prepared = _prepared.get(cache_key)
    if prepared is None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        names = tuple(compiled.positiontup or ())
        if not names or set(names) - set(keys) or compiled.literal_execute_params:
            raise NotImplementedError(f"cannot run {statement} at the driver level")
        converted = []
        for position, name in enumerate(names):
            process = compiled.binds[name].type._cached_bind_processor(dialect)
            if process is not None:
                converted.append((position, process))
        prepared = _prepared[cache_key] = Prepared(compiled.string, names, tuple(converted))
    return prepared


# SQLite: the request rows' multi-row insert.

SQLITE_MAX_ROWS = 500  # 47 columns a row: 23,500 parameters, under SQLite's 32,766


def sqlite_money(value: Decimal | None) -> int | None:
    """A quantized amount as `Money` stores it on SQLite: an integer of 1e-10 units.

    `value * 1E+10` keeps the amount's digits and moves its exponent (the coefficient of
    `MONEY_UNITS` is 1, so the product is exact in any context precision that holds the
    amount), and `int` of a number with no fraction left is exact: the same integer as
    `int(value.scaleb(10))`, in about half the time (0.43 against 0.86 us here).
    """
    if value is None:
        return None
    if not value:  # a zero cost (most components of most calls), whatever its exponent
        return 0
    return int(value * MONEY_UNITS)


MONEY_UNITS = Decimal(1).scaleb(MONEY_SCALE)  # Decimal('1E+10'): coefficient 1


def sqlite_time(value: datetime) -> str:
    """A UTC datetime as `UTCDateTime` stores it on SQLite (SQLAlchemy's DATETIME text)."""
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


@lru_cache(maxsize=64)
def sqlite_insert_sql(table: str, columns: tuple[str, ...], key: str, rows: int) -> str:
    """`INSERT INTO t (...) VALUES (?, ...), ... ON CONFLICT (key) DO NOTHING RETURNING key`."""
    one = "(" + ", ".join("?" * len(columns)) + ")"
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([one] * rows)}"
        f" ON CONFLICT ({key}) DO NOTHING RETURNING {key}"
    )
