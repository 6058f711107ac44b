"""A new SQLite ledger copied from one the migrations built before, instead of migrated again.

Bringing an empty SQLite file to the newest schema runs Alembic: its imports and the nine
migrations cost ~0.3 s of CPU before the first request (docs/performance.md, start-up fifth
pass), every time a gateway starts on a ledger that does not exist yet. After such a
migration the empty ledger is kept, through SQLite's backup API, in the per-user cache
(`$XDG_CACHE_HOME/farebox`, else `~/.cache/farebox`), named by the schema's head revision
and the SQLite library's version; the next new ledger is a copy of it (~1-2 ms). The copy
is the migrations' own output, byte for byte in its schema (tests/ledger/
test_ledger_template.py compares `sqlite_master` with a migrated file's), and it holds no
rows but Alembic's version row. Any failure (no home, a read-only cache, a damaged
template) leaves the migrations to do it, as before; `FAREBOX_LEDGER_TEMPLATE=0` turns
the cache off.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

_OFF = {"0", "false", "no", "off"}


def cache_dir() -> Path | None:
    """Where templates are kept, or None when this user has no cache folder."""
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "farebox"
    try:
        return Path.home() / ".cache" / "farebox"
    except RuntimeError:  # no HOME and no passwd entry
        return None


def template_path(head: str) -> Path | None:
    """The template for schema `head` with this SQLite library, or None when it is off."""
    if os.environ.get("FAREBOX_LEDGER_TEMPLATE", "1").strip().lower() in _OFF:
        return None
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"ledger-{head}-sqlite{sqlite3.sqlite_version}.db"


def is_new(path: Path) -> bool:
    """True when there is no ledger at `path` yet (nor a journal a crash left beside it)."""
    return not any(Path(f"{path}{end}").exists() for end in ("", "-wal", "-journal"))


def copy_into(path: Path, head: str) -> bool:
    """Create the ledger at `path` from the template for `head`; False when it cannot.

    The copy is written beside `path` and linked into place, so a ledger another process
    created in the meantime is never overwritten (the link fails and the migrations run,
    finding it at head or bringing it there).
    """
    template = template_path(head)
    if template is None or not template.is_file():
        return False
    scratch = path.with_name(f".{path.name}.{os.getpid()}.template")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _backup(_read_only(template), scratch)
        if recorded_version(scratch) != head:
            return False
        os.link(scratch, path)
        return True
    except (OSError, sqlite3.Error):
        return False
    finally:
        with contextlib.suppress(OSError):
            scratch.unlink()


def keep(path: Path, head: str) -> None:
    """Keep the ledger just migrated at `path` (still empty) as the template for `head`."""
    template = template_path(head)
    if template is None or template.exists():
        return
    scratch = template.with_name(f".{template.name}.{os.getpid()}")
    try:
        template.parent.mkdir(parents=True, exist_ok=True)
        _backup(_read_only(path), scratch)
        if recorded_version(scratch) == head:
            os.replace(scratch, template)
    except (OSError, sqlite3.Error):
        pass  # no template: the next new ledger is migrated, as this one was
    finally:
        with contextlib.suppress(OSError):
            scratch.unlink()


def _backup(source_uri: str, target: Path) -> None:
    """Copy the database at `source_uri` into a new file `target` (SQLite's backup API)."""
    source = sqlite3.connect(source_uri, uri=True)
    try:
        destination = sqlite3.connect(target)
        try:
            source.backup(destination)
            # A rollback journal in the file, whatever the source used: the engine turns
            # WAL on at its first connection, and the file then stands alone.
            destination.execute("PRAGMA journal_mode=DELETE")
        finally:
            destination.close()
    finally:
        source.close()


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
