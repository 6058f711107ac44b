"""A new SQLite ledger is a copy of the migrations' own output, kept once per schema head."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.ledger import template
from gateway.ledger.engine import head_revision, migrate


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.delenv("FAREBOX_LEDGER_TEMPLATE", raising=False)
    return folder / "farebox"


def _url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def _schema(path: Path) -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        return list(rows)


def _rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as connection:
        names = [
            n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {n: connection.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


async def test_the_first_new_ledger_is_migrated_and_kept_as_the_template(
    tmp_path: Path, cache: Path
) -> None:
    await migrate(_url(tmp_path / "a.db"))
    kept = template.template_path(head_revision())
    assert kept is not None and kept.parent == cache and kept.is_file()
    assert _schema(kept) == _schema(tmp_path / "a.db")
    assert {n: c for n, c in _rows(kept).items() if c} == {"alembic_version": 1}


async def test_the_next_new_ledger_is_the_template_copied(tmp_path: Path, cache: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))
    kept = template.template_path(head_revision())
    assert kept is not None
    with sqlite3.connect(kept) as connection:  # a mark only a copy can carry
        connection.execute("CREATE TABLE copied_mark (x)")
    await migrate(_url(tmp_path / "sub" / "b.db"))
    names = {name for _, name, _ in _schema(tmp_path / "sub" / "b.db")}
    assert "copied_mark" in names
    assert not list((tmp_path / "sub").glob(".*template"))  # the scratch copy is gone


async def test_a_copied_ledger_has_the_migrated_schema_and_takes_rows(
    tmp_path: Path, cache: Path
) -> None:
    await migrate(_url(tmp_path / "a.db"))
    await migrate(_url(tmp_path / "b.db"))  # copied
    assert _schema(tmp_path / "b.db") == _schema(tmp_path / "a.db")
    with sqlite3.connect(tmp_path / "b.db") as connection:
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"  # the engine's first connection turns WAL on, as for a new file
    await migrate(_url(tmp_path / "b.db"))  # at head: a no-op
    assert _schema(tmp_path / "b.db") == _schema(tmp_path / "a.db")


async def test_an_existing_ledger_is_never_replaced(tmp_path: Path, cache: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))
    with sqlite3.connect(tmp_path / "a.db") as connection:
        connection.execute("CREATE TABLE mine (x)")
        connection.execute("INSERT INTO mine VALUES (1)")
    await migrate(_url(tmp_path / "a.db"))
    assert _rows(tmp_path / "a.db")["mine"] == 1


async def test_a_damaged_template_leaves_it_to_the_migrations(tmp_path: Path, cache: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))
    kept = template.template_path(head_revision())
    assert kept is not None
    kept.write_bytes(b"not a database" * 100)
    await migrate(_url(tmp_path / "b.db"))
    assert _schema(tmp_path / "b.db") == _schema(tmp_path / "a.db")
    assert not list(tmp_path.glob(".*template"))


async def test_turned_off_no_template_is_kept(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAREBOX_LEDGER_TEMPLATE", "0")
    await migrate(_url(tmp_path / "a.db"))
    assert template.template_path(head_revision()) is None
    assert not cache.exists()


async def test_a_cache_folder_that_cannot_be_made_leaves_it_to_the_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")  # no folder can be made under a file, not even by root
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv("FAREBOX_LEDGER_TEMPLATE", raising=False)
    await migrate(_url(tmp_path / "a.db"))
    await migrate(_url(tmp_path / "b.db"))
    assert _rows(tmp_path / "a.db")["alembic_version"] == 1
    assert _schema(tmp_path / "b.db") == _schema(tmp_path / "a.db")


async def test_a_ledger_behind_head_is_still_migrated(tmp_path: Path, cache: Path) -> None:
    await migrate(_url(tmp_path / "a.db"))  # the template, at head
    await migrate(_url(tmp_path / "old.db"), revision="0008")
    with sqlite3.connect(tmp_path / "old.db") as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("0008",)
        ]
    await migrate(_url(tmp_path / "old.db"))
    assert template.recorded_version(tmp_path / "old.db") == head_revision()
    assert _schema(tmp_path / "old.db") == _schema(tmp_path / "a.db")


async def test_a_folder_named_with_uri_characters_is_read_where_it_is(
    tmp_path: Path, cache: Path
) -> None:
    folder = tmp_path / "a#b c"  # a URI fragment, unquoted
    await migrate(_url(folder / "first.db"))
    await migrate(_url(folder / "second.db"))  # copied from the template
    await migrate(_url(folder / "second.db"))  # at head, read through a read-only URI
    assert template.recorded_version(folder / "second.db") == head_revision()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b c", "cache"]
