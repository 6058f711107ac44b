"""Rows the database refuses for good never hold up the ones behind them, now or after a restart."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from ledger_db import PG_HOST, PG_PORT, WriterFactory, pg_url
from ledger_helpers import count_requests, record, wait_until
from ledger_proxy import TcpProxy
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import LedgerWriter, WriterConfig, get_task, make_engine, migrate
from gateway.ledger.records import RequestRecord, TaskFinish
from gateway.ledger.refusal import refusal_reason
from gateway.ledger.spool import REJECTED_DIR, Spool, encode
from gateway.ledger.store import REQUESTS
from gateway.metrics import Metrics

GOOD = 12


def rejected(spool_dir: Path) -> list[dict[str, Any]]:
    """Every line of every file in rejected/."""
    lines = []
    for path in sorted((spool_dir / REJECTED_DIR).glob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines()]
    return lines


def rejected_ids(spool_dir: Path) -> set[str]:
    return {item["data"].get("id") or item["data"]["task_id"] for item in rejected(spool_dir)}


async def stored_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as connection:
        return set((await connection.execute(select(REQUESTS.c.id))).scalars())


def interleave(poison: list[RequestRecord]) -> tuple[list[RequestRecord], list[str]]:
    """Good rows before, between and after the poison; returns the records and good ids."""
    good = [record("good", request_id=f"g{i}", id=f"good-{i}") for i in range(GOOD)]
    records = good[:2]
    for n, item in enumerate(poison):
        records += [item, good[2 + n]]
    records += good[2 + len(poison) :]
    return records, [g.id for g in good]


def poison_for(dialect: str) -> dict[str, RequestRecord]:
    """Records the database (or JSON) refuses for good, by their row id."""
    poison = {
        "overflow": record("overflow", id="overflow", prompt_tokens=10**19),
        "surrogate-id": record("bad-\udcff", id="surrogate-id"),
        "surrogate-step": record("surrogate", id="surrogate-step", task_step="\udcff"),
    }
    if dialect == "postgresql":  # SQLite stores a NUL byte; PostgreSQL refuses it (22021)
        poison["nul-id"] = record("nul\x00task", id="nul-id")
        poison["nul-step"] = record("nul-step", id="nul-step", task_step="step\x00")
        poison["nul-team"] = record("nul-team", id="nul-team", team="t\x00")
        # Too big for a btree index entry even compressed (54000, program limit exceeded).
        poison["huge-id"] = record(random.Random(9).randbytes(12_000).hex(), id="huge-id")
    return poison


async def test_poison_rows_block_none_of_the_rows_after_them(
    make_writer: WriterFactory,
    engine: AsyncEngine,
    spool_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    poison = poison_for(engine.dialect.name)
    records, good = interleave(list(poison.values()))
    writer = make_writer()
    await writer.start()
    for item in records:
        writer.submit(item)
    await wait_until(lambda: writer.rows_written == GOOD and writer.spooled == 0)
    assert await stored_ids(engine) == set(good)
    assert rejected_ids(spool_dir) == set(poison)
    assert all(item["reason"] for item in rejected(spool_dir))
    assert writer.rows_rejected == len(poison) and writer.flush_failures == 0
    # One log line per refused row, and nothing else above INFO from the writer.
    logged = [r for r in caplog.records if r.name.startswith("gateway.ledger")]
    assert [r.levelname for r in logged if r.levelno > logging.INFO] == ["ERROR"] * len(poison)
    assert all("set aside" in r.getMessage() for r in logged if r.levelno > logging.INFO)
    detail = await get_task(engine, "good")
    assert detail is not None and detail.task.request_count == GOOD

    metrics = Metrics()
    metrics.observe_ledger(writer.stats())
    metrics.observe_ledger(writer.stats())  # a second scrape adds nothing
    assert f"farebox_ledger_rows_rejected_total {float(len(poison))}" in metrics.render().decode()


async def test_wide_counts_are_stored_not_refused(
    make_writer: WriterFactory, engine: AsyncEngine
) -> None:
    # Over the old 32-bit columns (3e9), and the largest a SQLite or BIGINT column holds.
    wide = [
        record("wide", id="w1", prompt_tokens=3_000_000_000, duration_ms=3_000_000_000),
        record("wide", id="w2", completion_tokens=10**15, expected_cached_tokens=2**40),
        record("wide", id="w3", reasoning_tokens=2**63 - 1 - 10**15 - 1),
    ]
    writer = make_writer()
    await writer.start()
    for item in wide:
        writer.submit(item)
    await wait_until(lambda: writer.rows_written == 3)
    detail = await get_task(engine, "wide")
    assert detail is not None
    assert detail.task.prompt_tokens == sum(item.prompt_tokens for item in wide)
    assert detail.task.reasoning_tokens == sum(item.reasoning_tokens for item in wide)
    assert {r.id: r.duration_ms for r in detail.requests}["w1"] == 3_000_000_000
    assert writer.rows_rejected == 0


async def test_a_finish_the_database_refuses_is_set_aside(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    writer = make_writer()
    await writer.start()
    writer.submit(record("fine"))
    writer.finish_task("bad-\udcff", "success")  # not even JSON can carry it
    if engine.dialect.name == "postgresql":
        writer.finish_task("nul\x00", "success")
    writer.finish_task("fine", "success")
    assert await writer.flush()
    detail = await get_task(engine, "fine")
    assert detail is not None and detail.task.status == "success"
    expected = 2 if engine.dialect.name == "postgresql" else 1
    assert writer.rows_rejected == expected
    assert [item["kind"] for item in rejected(spool_dir)] == ["finish"] * expected


def poisoned_segment(spool_dir: Path, dialect: str) -> tuple[list[str], set[str]]:
    """Leave a segment on disk as a crashed process would: good rows around bad ones."""
    spool_dir.mkdir(parents=True)
    # JSON cannot carry a surrogate, so no segment ever holds one.
    bad = {key: p for key, p in poison_for(dialect).items() if not key.startswith("surrogate")}
    records, good = interleave(list(bad.values()))
    lines = [encode(item) for item in records]
    # A line that does not decode, and one whose cost no ledger column can hold.
    lines.insert(3, b'{"kind": "request", "data": {"truncated\n')
    huge = record("huge", id="huge", cost_total=Decimal(1)).to_json() | {"cost_total": "1e12"}
    lines.insert(6, json.dumps({"kind": "request", "data": huge}).encode() + b"\n")
    (spool_dir / "00000000000000000001-crashed-000000.jsonl").write_bytes(b"".join(lines))
    return good, set(bad)


async def test_a_poisoned_segment_left_on_disk_replays_on_restart(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    good, bad = poisoned_segment(spool_dir, engine.dialect.name)
    writer: LedgerWriter = make_writer()
    await writer.start()
    await wait_until(lambda: writer.spooled == 0)
    assert await stored_ids(engine) == set(good)
    items = rejected(spool_dir)
    assert {item["data"]["id"] for item in items if "data" in item} == bad
    lines = [item["line"] for item in items if "line" in item]
    assert len(lines) == 2 and any("1e12" in line for line in lines)
    assert writer.rows_rejected == len(bad) + 2
    assert list(spool_dir.glob("*.jsonl")) == []

    # The next start finds nothing left to replay, and the rejected file is unchanged.
    successor = make_writer()
    await successor.start()
    assert successor.spooled == 0 and len(rejected(spool_dir)) == len(items)


async def test_an_entry_that_no_json_can_carry_is_spooled_without_it(
    make_writer: WriterFactory, engine: AsyncEngine, spool_dir: Path
) -> None:
    writer = make_writer()
    await writer.start()
    await writer.close()
    # After close(), submit writes straight to the spool: the same rule holds there.
    writer.submit(record("late-\udcff", id="late-bad"))
    writer.submit(record("late", id="late-good"))
    successor = make_writer()
    await successor.start()
    await wait_until(lambda: successor.spooled == 0)
    assert await count_requests(engine) == 1
    assert rejected_ids(spool_dir) == {"late-bad"} and writer.rows_rejected == 1


def test_the_spool_refuses_only_the_entry_json_cannot_carry(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    kept = TaskFinish("t", "success")
    segment = spool.write([kept, TaskFinish("t\udcff", "success")])
    assert segment.entries == 1 and len(segment.refused) == 1
    assert spool.read(segment) == [kept]
    assert [item["data"]["task_id"] for item in rejected(tmp_path)] == ["t\udcff"]


@pytest.mark.postgres
async def test_an_outage_still_keeps_the_spool_and_the_poison_is_set_aside_after(
    pg_database: str, spool_dir: Path
) -> None:
    await migrate(pg_url(pg_database))
    proxy = TcpProxy(PG_HOST, PG_PORT)
    await proxy.start()
    direct = make_engine(pg_url(pg_database))
    through = make_engine(pg_url(pg_database, proxy.port), connect_args={"timeout": 2})
    config = WriterConfig(spool_dir, flush_interval=0.02, retry_initial=0.05, retry_max=0.2)
    writer = LedgerWriter(through, replace(config, idle_timeout=None))
    await writer.start()
    try:
        await proxy.stop()
        records, good = interleave(list(poison_for("postgresql").values()))
        for item in records:
            writer.submit(item)
        await wait_until(lambda: writer.flush_failures >= 2 and writer.pending == 0)
        # Down is not refused: nothing was set aside, everything waits on disk.
        assert writer.rows_rejected == 2  # only the two no JSON can carry
        assert writer.spooled == len(records) - 2
        await proxy.start()
        await wait_until(lambda: writer.spooled == 0)
        assert await stored_ids(direct) == set(good)
        assert rejected_ids(spool_dir) == set(poison_for("postgresql"))
    finally:
        await writer.close()
        await proxy.stop()
        await through.dispose()
        await direct.dispose()


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (asyncpg.exceptions.CharacterNotInRepertoireError("NUL"), True),  # 22021
        (asyncpg.exceptions.NumericValueOutOfRangeError("overflow"), True),  # 22003
        (asyncpg.exceptions.NotNullViolationError("team"), True),  # 23502
        (asyncpg.exceptions.ProgramLimitExceededError("index row too big"), True),  # 54000
        (asyncpg.exceptions.DataError("value out of int64 range"), True),  # client-side 22000
        (OverflowError("Python int too large to convert to SQLite INTEGER"), True),
        (UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed"), True),
        (sqlite3.IntegrityError("NOT NULL constraint failed"), True),
        (asyncpg.exceptions.SerializationError("retry"), False),  # 40001
        (asyncpg.exceptions.DeadlockDetectedError("retry"), False),  # 40P01
        (asyncpg.exceptions.AdminShutdownError("bye"), False),  # 57P01
        (asyncpg.exceptions.TooManyConnectionsError("busy"), False),  # 53300
        (asyncpg.exceptions.ConnectionDoesNotExistError("gone"), False),  # 08003
        (asyncpg.exceptions.UndefinedColumnError("not migrated yet"), False),  # 42703
        (sqlite3.OperationalError("database is locked"), False),
        (ConnectionRefusedError(111, "refused"), False),
        (TimeoutError(), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_permanent_and_transient_errors_are_told_apart(
    error: BaseException, permanent: bool
) -> None:
    assert (refusal_reason(error) is not None) is permanent
    # Wrapped by SQLAlchemy the way the drivers' errors reach the writer, same answer.
    wrapped = DBAPIError("INSERT ...", None, error)  # type: ignore[arg-type]
    assert (refusal_reason(wrapped) is not None) is permanent
