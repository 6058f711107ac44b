"""A new SQLite ledger is built from the migrations' schema script, not migrated again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from gateway.ledger import template
from gateway.ledger.engine import head_revision, make_engine, migrate
from gateway.ledger.write_schema import migrated_schema


@pytest.fixture(autouse=True)
def script_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAREBOX_LEDGER_TEMPLATE", raising=False)


def _url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def _schema(path: Path) -> list[tuple[str, str, str, str | None]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        )
        return list(rows)


def _pragmas(path: Path) -> dict[str, object]:
    names = ("user_version", "application_id", "page_size", "auto_vacuum", "encoding")
    with sqlite3.connect(path) as connection:
        return {n: connection.execute(f"PRAGMA {n}").fetchone()[0] for n in names}


def _rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as connection:
        names = [
            n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {n: connection.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


async def _migrated(path: Path) -> Path:
    """A ledger the migrations themselves built (a named revision skips the script)."""
    await migrate(_url(path), revision=head_revision())
    return path


async def test_the_script_is_at_the_migrations_head_and_is_what_they_write() -> None:
    script = template.SCHEMA.read_text(encoding="utf-8")
    assert template.script_head(script) == head_revision(), (
        "gateway/ledger/sqlite_schema.sql is behind the migrations: "
        "run `python -m gateway.ledger.write_schema`"
    )
    # The migrations make some indexes in no fixed order: the same statements, sorted.
    assert sorted(script.split(";\n")) == sorted((await migrated_schema()).split(";\n"))


async def test_a_new_ledger_is_the_migrations_schema_with_no_rows(tmp_path: Path) -> None:
    migrated = await _migrated(tmp_path / "migrated.db")
    await migrate(_url(tmp_path / "sub" / "new.db"))
    new = tmp_path / "sub" / "new.db"
    assert _schema(new) == _schema(migrated)
    assert _pragmas(new) == _pragmas(migrated)
    assert {n: c for n, c in _rows(new).items() if c} == {"alembic_version": 1}
    assert template.recorded_version(new) == head_revision()
    assert not list((tmp_path / "sub").glob(".*template"))  # the scratch file is gone


async def test_a_new_ledger_comes_from_the_script_not_the_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "schema.sql"
    marked = template.SCHEMA.read_text(encoding="utf-8") + "CREATE TABLE script_mark (x);\n"
    script.write_text(marked, encoding="utf-8")
    monkeypatch.setattr(template, "SCHEMA", script)
    await migrate(_url(tmp_path / "a.db"))
    assert "script_mark" in {name for _, name, _, _ in _schema(tmp_path / "a.db")}


async def test_a_new_ledger_takes_rows_and_turns_wal_on(tmp_path: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))
    with sqlite3.connect(tmp_path / "a.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    engine = make_engine(_url(tmp_path / "a.db"))
    try:
        async with engine.begin() as connection:
            mode = (await connection.execute(text("PRAGMA journal_mode"))).scalar()
            await connection.execute(
                text(
                    "INSERT INTO audit_log (at, actor, action, outcome) VALUES (0, 'a', 'b', 'ok')"
                )
            )
    finally:
        await engine.dispose()
    assert mode == "wal"
    assert _rows(tmp_path / "a.db")["audit_log"] == 1
    await migrate(_url(tmp_path / "a.db"))  # at head: a no-op
    assert _rows(tmp_path / "a.db")["audit_log"] == 1


async def test_an_existing_ledger_is_never_replaced(tmp_path: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))
    with sqlite3.connect(tmp_path / "a.db") as connection:
        connection.execute("CREATE TABLE mine (x)")
        connection.execute("INSERT INTO mine VALUES (1)")
    await migrate(_url(tmp_path / "a.db"))
    assert _rows(tmp_path / "a.db")["mine"] == 1


@pytest.mark.parametrize(
    "script",
    [
        "-- head: 0001\nCREATE TABLE stale (x);\n",  # a migration added, the script not written
        "",  # no head line
        "-- head: {head}\nCREATE TABLE broken (;\n",  # damaged
    ],
    ids=["behind-head", "unmarked", "damaged"],
)
async def test_a_script_that_cannot_serve_leaves_it_to_the_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str
) -> None:
    migrated = await _migrated(tmp_path / "migrated.db")
    path = tmp_path / "schema.sql"
    path.write_text(script.format(head=head_revision()), encoding="utf-8")
    monkeypatch.setattr(template, "SCHEMA", path)
    await migrate(_url(tmp_path / "a.db"))
    assert _schema(tmp_path / "a.db") == _schema(migrated)
    assert not list(tmp_path.glob(".*template"))


async def test_a_missing_script_leaves_it_to_the_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template, "SCHEMA", tmp_path / "absent.sql")
    migrated = await _migrated(tmp_path / "migrated.db")
    await migrate(_url(tmp_path / "a.db"))
    assert _schema(tmp_path / "a.db") == _schema(migrated)


async def test_turned_off_the_migrations_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "schema.sql"
    marked = template.SCHEMA.read_text(encoding="utf-8") + "CREATE TABLE script_mark (x);\n"
    script.write_text(marked, encoding="utf-8")
    monkeypatch.setattr(template, "SCHEMA", script)
    monkeypatch.setenv("FAREBOX_LEDGER_TEMPLATE", "0")
    await migrate(_url(tmp_path / "a.db"))
    names = {name for _, name, _, _ in _schema(tmp_path / "a.db")}
    assert "script_mark" not in names and "requests" in names


async def test_a_ledger_behind_head_is_still_migrated(tmp_path: Path) -> None:
    migrated = await _migrated(tmp_path / "migrated.db")
    await migrate(_url(tmp_path / "old.db"), revision="0008")
    assert template.recorded_version(tmp_path / "old.db") == "0008"
    await migrate(_url(tmp_path / "old.db"))
    assert template.recorded_version(tmp_path / "old.db") == head_revision()
    assert _schema(tmp_path / "old.db") == _schema(migrated)


async def test_a_folder_named_with_uri_characters_is_written_where_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "a#b c"  # a URI fragment, unquoted
    await migrate(_url(folder / "first.db"))  # from the script
    await migrate(_url(folder / "first.db"))  # at head, read through a read-only URI
    assert template.recorded_version(folder / "first.db") == head_revision()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b c"]
    assert sorted(p.name for p in folder.iterdir()) == ["first.db"]


async def test_no_cache_folder_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    await migrate(_url(tmp_path / "a.db"))
    assert not (tmp_path / "cache").exists()
