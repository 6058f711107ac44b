"""A new SQLite ledger created from the migrations' schema, kept in the package, not migrated.

Bringing an empty SQLite file to the newest schema runs Alembic: its imports and the nine
migrations cost ~0.3-0.6 s of CPU before the first request (docs/performance.md, start-up
fifth pass and the 2026-12-03 start-up note), on every new ledger. The schema they build
is kept beside them instead, as the SQL that SQLite recorded for each table and index
(`sqlite_schema.sql`, headed by the revision it is at, written by
`python -m gateway.ledger.write_schema` from a migrated file); a new ledger is that script run
into a scratch file and linked into place (~2 ms, no Alembic, no cache folder: the first
start on a new machine or in a new container is as quick as any). tests/ledger/
test_ledger_template.py checks that the script is at the migrations' head and that what
it builds is what they build, table for table and index for index. A script behind head
(a migration added without writing it again), or any failure, leaves the migrations to
do it, as before; `FAREBOX_LEDGER_TEMPLATE=0` turns the script off.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

SCHEMA = Path(__file__).with_name("sqlite_schema.sql")
_HEAD_MARK = "-- head: "
_WRITTEN_BY = "Written by `python -m gateway.ledger.write_schema`"
_OFF = {"0", "false", "no", "off"}


def schema_script(head: str) -> str | None:
    """The schema script when it is at `head` and turned on, else None."""
    if os.environ.get("FAREBOX_LEDGER_TEMPLATE", "1").strip().lower() in _OFF:
        return None
    try:
        script = SCHEMA.read_text(encoding="utf-8")
    except OSError:
        return None
    return script if script_head(script) == head else None


def script_head(script: str) -> str | None:
    """The revision a schema script says it is at (its first line), or None."""
    first = script.split("\n", 1)[0]
    return first[len(_HEAD_MARK) :].strip() if first.startswith(_HEAD_MARK) else None


def is_new(path: Path) -> bool:
    """True when there is no ledger at `path` yet (nor a journal a crash left beside it)."""
    return not any(Path(f"{path}{end}").exists() for end in ("", "-wal", "-journal"))


def copy_into(path: Path, head: str) -> bool:
    """Create the ledger at `path` from the schema script at `head`; False when it cannot.

    The ledger is built beside `path` and linked into place, so a ledger another process
    created in the meantime is never overwritten (the link fails and the migrations run,
    finding it at head or bringing it there).
    """
    script = schema_script(head)
    if script is None:
        return False
    scratch = path.with_name(f".{path.name}.{os.getpid()}.template")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            scratch.unlink()  # a crashed start's leftover of the same pid
        _run_script(script, scratch)
        if recorded_version(scratch) != head:
            return False
        os.link(scratch, path)
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        with contextlib.suppress(OSError):
            scratch.unlink()


def _run_script(script: str, target: Path) -> None:
    """Run `script` into the new file `target`, in one transaction, with a rollback journal
    (the engine turns WAL on at its first connection, as for any new file)."""
    connection = sqlite3.connect(target, isolation_level=None)
    try:
        connection.executescript(f"BEGIN;\n{script}\nCOMMIT;")
    finally:
        connection.close()


def dump_schema(path: Path, head: str) -> str:
    """The schema script of the migrated ledger at `path`: what SQLite recorded for each
    table, index and trigger, in the order they were made, and the Alembic row."""
    connection = sqlite3.connect(_read_only(path), uri=True)
    try:
        rows = connection.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    finally:
        connection.close()
    lines = [f"{_HEAD_MARK}{head}", f"-- {_WRITTEN_BY}: do not edit."]
    lines += [f"{sql};" for (sql,) in rows]
    lines.append(f"INSERT INTO alembic_version (version_num) VALUES ('{head}');")
    return "\n".join(lines) + "\n"


def recorded_version(path: Path) -> str | None:
    """The Alembic revision recorded in the SQLite file at `path`, or None."""
    try:
        connection = sqlite3.connect(_read_only(path), uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return rows[0][0] if len(rows) == 1 else None


def _read_only(path: Path) -> str:
    """A read-only SQLite URI for `path` (quoted: a '?' or '#' in a folder name stays in it)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"
