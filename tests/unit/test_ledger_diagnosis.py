"""Each way the ledger's database can be unusable is one line that ends with the fix."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from gateway.ledger.diagnosis import explain, missing_ledger, shown
from gateway.ledger.engine import LedgerURLError

PG = "postgresql://farebox:s3cret@db.internal:5432/farebox"


@pytest.mark.parametrize(
    ("error", "url", "expected"),
    [
        (
            ArgumentError("bad"),
            "not a url s3cret",
            "FAREBOX_DATABASE_URL is not a database URL: use sqlite",
        ),
        (
            LedgerURLError("unsupported ledger database URL scheme 'mysql'"),
            "mysql://u:s3cret@h/d",
            "FAREBOX_DATABASE_URL: unsupported ledger database URL scheme 'mysql'",
        ),
        (
            socket.gaierror(-2, "Name or service not known"),
            PG,
            "cannot resolve the ledger database host 'db.internal'",
        ),
        (TimeoutError(), PG, "did not answer in time: is it up? check FAREBOX_DATABASE_URL"),
        (
            ConnectionRefusedError(111, "Connect call failed"),
            PG,
            "cannot reach the ledger database postgresql://farebox:***@db.internal:5432/farebox (Connect call failed): start it, or fix FAREBOX_DATABASE_URL",
        ),
        (
            DBAPIError("SELECT", {}, Exception('role "farebox" does not exist')),
            PG,
            'refused: role "farebox" does not exist: fix FAREBOX_DATABASE_URL (user, password, database name)',
        ),
        (
            OperationalError("SELECT", {}, Exception("no such table: requests")),
            PG,
            "holds no Farebox ledger (no requests table)",
        ),
        (
            DBAPIError("SELECT", {}, Exception('relation "requests" does not exist\nLINE 1')),
            PG,
            "holds no Farebox ledger",
        ),
        (
            PermissionError(13, "Permission denied"),
            "sqlite+aiosqlite:////srv/farebox.db",
            "cannot open the ledger file /srv/farebox.db (Permission denied): set FAREBOX_DATA_DIR to a writable folder",
        ),
    ],
)
def test_one_line_with_the_fix_and_no_password(
    error: BaseException, url: str, expected: str
) -> None:
    said = explain(error, url)
    assert expected in said
    assert "\n" not in said and "s3cret" not in said


def test_the_setting_named_is_the_one_the_user_gave() -> None:
    assert explain(TimeoutError(), PG, "--database-url").endswith("check --database-url")


def test_a_missing_sqlite_ledger_is_named_before_anything_is_opened(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "farebox.db"
    said = missing_ledger(f"sqlite+aiosqlite:///{path}", "--database-url")
    assert said is not None and said.startswith(f"no ledger at {path}: the gateway writes it")
    assert not (tmp_path / "nowhere").exists()
    path.parent.mkdir()
    path.write_bytes(b"")
    assert missing_ledger(f"sqlite:///{path}", "--database-url") is None
    assert missing_ledger(PG, "--database-url") is None  # PostgreSQL: the connection says
    assert missing_ledger("sqlite+aiosqlite:///:memory:", "--database-url") is None


def test_shown_hides_the_password() -> None:
    assert shown(PG) == "postgresql://farebox:***@db.internal:5432/farebox"
    assert shown("::") == "(unparseable)"
