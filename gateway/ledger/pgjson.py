"""PostgreSQL: a statement's rows as one JSON text parameter, read back with the columns' types.

asyncpg encodes each value of an array or an `executemany` row in the event loop's
thread, and for an array checks every element against `collections.abc` in Python: for
a flush of 150 request rows (47 columns as arrays) that was ~6.6 ms of CPU on the loop in
one go, and ~2.2 ms for the task upsert's rows (bench/ledger_stall.py). orjson writes the
same rows as one JSON array in C (Decimals as their text, datetimes in ISO 8601 with the
offset), a slice at a time, and PostgreSQL casts each value to the column's own type
(`(e->>3)::NUMERIC(20, 10)`), so what is stored is what the typed parameters stored:
numeric and timestamptz parse their text exactly, a float is written in its shortest
round-trip form (a batch with an infinite or NaN float, which JSON cannot carry, takes the
array statement instead). The text is cast to `jsonb`, parsed once: on `json` each `->>`
parses the row again from its start, and the server's CPU per row tripled (62-90 us with
arrays, 222-252 with json, 62-97 with jsonb: bench/ledger_flush.py `server_mean`).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import orjson
from sqlalchemy import Table

from gateway.ledger.records import money_text

Rows = list[tuple[Any, ...]]


def encode_rows(rows: Rows) -> bytes:
    """The rows as JSON arrays joined by commas (`json_text` adds the brackets)."""
    return orjson.dumps(rows, default=money_text)[1:-1]


def json_text(parts: list[bytes]) -> str:
    """One JSON array of the rows `encode_rows` wrote, slice by slice."""
    return "[" + b",".join(part for part in parts if part).decode() + "]"


def finite(rows: Rows, position: int) -> bool:
    """Whether every float at `position` is finite (JSON has no inf or NaN)."""
    return all(row[position] is None or math.isfinite(row[position]) for row in rows)


@cache
def insert_sql(table: Table, names: tuple[str, ...], tail: str) -> str:
    """`INSERT INTO t (names) SELECT (e->>0)::type0, ... FROM jsonb_array_elements($1) e`
    followed by `tail` (the ON CONFLICT clause and RETURNING of the statement it replaces)."""
    from sqlalchemy.dialects import postgresql  # here: a SQLite ledger never loads it

    dialect = postgresql.asyncpg.dialect()
    casts = ", ".join(
        f"(e->>{position})::{table.c[name].type.compile(dialect)}"
        for position, name in enumerate(names)
    )
    return (
        f"INSERT INTO {table.name} ({', '.join(names)}) SELECT {casts}"
        f" FROM jsonb_array_elements($1::text::jsonb) AS e {tail}"
    )


def conflict_tail(sql: str) -> str:
    """The `ON CONFLICT ...` clause (and anything after it) of a compiled INSERT."""
    start = sql.index(" ON CONFLICT ")
    return sql[start + 1 :]
