"""The ledger metadata's whole shape as JSON, to compare two trees' `gateway/ledger/models.py`.

Run: `python bench/ledger_schema_dump.py TREE [--postgresql-options] > out.json` for each
tree, then `cmp` the two files. Per table: each column's name, key, type, nullability,
primary key, autoincrement, default, server default, index/unique flags; the primary key's
columns; the constraints; the indexes (name, columns, unique, options); and the CREATE TABLE
and CREATE INDEX text on SQLite and on PostgreSQL (`--postgresql-options` first gives the
indexes their PostgreSQL INCLUDE columns, as a PostgreSQL engine does). Used to show that
the Core tables of 34a3e83 are the declarative models' of 4768f4c, column for column.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def dump(tree: str, postgresql_options: bool) -> dict[str, Any]:
    sys.path.insert(0, tree)
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    import gateway.ledger.models as models

    if postgresql_options:
        models.with_postgresql_options()
    metadata = models.Base.metadata
    shape: dict[str, Any] = {"__order__": list(metadata.tables)}
    shape["__sorted__"] = [table.name for table in metadata.sorted_tables]
    for name, table in metadata.tables.items():
        columns = [
            [
                c.name,
                c.key,
                repr(c.type),
                c.nullable,
                c.primary_key,
                str(c.autoincrement),
                repr(getattr(c.default, "arg", None)),
                str(getattr(c.server_default, "arg", None)),
                c.index,
                c.unique,
            ]
            for c in table.columns
        ]
        indexes = sorted(
            [ix.name, [c.name for c in ix.columns], ix.unique, dict(ix.kwargs)]
            for ix in table.indexes
        )
        ddl = {}
        for label, dialect in (("sqlite", sqlite.dialect()), ("postgresql", postgresql.dialect())):
            create = str(CreateTable(table).compile(dialect=dialect))
            index_ddl = sorted(
                str(CreateIndex(ix).compile(dialect=dialect)) for ix in table.indexes
            )
            ddl[label] = [create, *index_ddl]
        shape[name] = {
            "columns": columns,
            "indexes": indexes,
            "ddl": ddl,
            "primary_key": [c.name for c in table.primary_key.columns],
            "constraints": sorted(f"{type(c).__name__} {c.name}" for c in table.constraints),
            "options": repr(dict(table.kwargs)),
        }
    return shape


if __name__ == "__main__":
    print(
        json.dumps(
            dump(sys.argv[1], "--postgresql-options" in sys.argv[2:]), indent=1, sort_keys=True
        )
    )
