"""Why the ledger's database cannot be used, in one line that ends with the fix.

`farebox serve` checks the ledger before it starts (gateway.preflight) and `farebox report`
before it reads: a wrong FAREBOX_DATABASE_URL, a PostgreSQL that is down, a database that
does not exist or a ledger that was never written each print one line, never a traceback.
Passwords are never shown: URLs are rendered with `***` in their place.
"""

from __future__ import annotations

import socket
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from gateway.ledger.engine import LedgerURLError, async_url

FORMS = "sqlite+aiosqlite:///path/to/farebox.db or postgresql://user@host:5432/dbname"


def shown(url: str) -> str:
    """The URL with its password hidden, or a placeholder when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(unparseable)"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite ledger URL; None for PostgreSQL or an in-memory database."""
    try:
        parsed = async_url(url)
    except (ArgumentError, LedgerURLError):
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in {"", ":memory:"}:
        return None
    return None if database.startswith("file:") else Path(database)


def missing_ledger(url: str, setting: str) -> str | None:
    """Why a reader would find no ledger at `url` (a SQLite file never written), or None.

    Checked before connecting: opening a missing SQLite file creates it (and its folder)."""
    path = sqlite_file(url)
    if path is None or path.exists():
        return None
    return (
        f"no ledger at {path}: the gateway writes it there once it runs "
        f"(`farebox serve` with the same FAREBOX_DATA_DIR); read another with {setting}, "
        "FAREBOX_DATA_DIR or FAREBOX_DATABASE_URL, or a running gateway with --url"
    )


def explain(exc: BaseException, url: str, setting: str = "FAREBOX_DATABASE_URL") -> str:
    """One line saying what failed with the ledger at `url` and how to fix it."""
    if isinstance(exc, ArgumentError):  # the input is not echoed: it may hold a password
        return f"{setting} is not a database URL: use {FORMS}"
    if isinstance(exc, LedgerURLError):
        return f"{setting}: {exc}"
    where = shown(url)
    path = sqlite_file(url)
    if path is not None and isinstance(exc, OSError | DBAPIError):
        reason = exc.strerror if isinstance(exc, OSError) else _first_line(exc)
        return (
            f"cannot open the ledger file {path} ({reason}): set FAREBOX_DATA_DIR to a "
            "writable folder, or FAREBOX_DATABASE_URL to another database"
        )
    if isinstance(exc, socket.gaierror):
        host = make_url(url).host
        return f"cannot resolve the ledger database host {host!r} ({where}): fix {setting}"
    if isinstance(exc, TimeoutError):
        return f"the ledger database {where} did not answer in time: is it up? check {setting}"
    if isinstance(exc, OSError):
        return (
            f"cannot reach the ledger database {where} ({exc.strerror or exc}): start it, "
            f"or fix {setting}"
        )
    if _no_tables(exc):
        return (
            f"the database {where} holds no Farebox ledger (no requests table): point "
            f"{setting} at the gateway's database, or start the gateway on this one once "
            "(it creates the tables)"
        )
    if isinstance(exc, DBAPIError):
        return (
            f"the ledger database {where} refused: {_first_line(exc)}: fix {setting} (user, "
            "password, database name), or create the database"
        )
    return f"the ledger database {where} failed: {_first_line(exc)}"


def _no_tables(exc: BaseException) -> bool:
    text = _first_line(exc)
    return "no such table" in text or ('relation "' in text and "does not exist" in text)


def _first_line(exc: BaseException) -> str:
    """The driver's own message (SQLAlchemy's wrapper adds a class name and a link)."""
    inner = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = str(inner).strip().splitlines() or [type(inner).__name__]
    return lines[0]


# What reading or migrating the ledger can raise, besides our own URL check.
FAILURES: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError, LedgerURLError)
