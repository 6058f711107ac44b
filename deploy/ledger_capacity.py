"""How many ledger rows per second one PostgreSQL database commits from several replicas.

Each simulated replica is the gateway's own `LedgerWriter` (in-memory queue, fsynced spool
segment every flush interval, one transaction per segment: row inserts plus task upserts)
with its own spool directory, all on one PostgreSQL database created for the run and
dropped after it. Every writer is handed its rows in steps of `--rate` rows a second per
writer (agent tasks of 10 steps each) for `--seconds`; the run reports the rows committed
per second and how far the last commit trailed the last submission. docs/deploy.md cites
it for "how far one PostgreSQL ledger goes".

    .venv/bin/python deploy/ledger_capacity.py [--writers 3] [--rate 1000] [--seconds 5] [--json]

Exits 1 when a row is missing from the database after the writers closed, 2 when
PostgreSQL (127.0.0.1:5432, user postgres, database test) is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
from sqlalchemy import func, select

from gateway.ledger import LedgerWriter, WriterConfig, make_engine, migrate
from gateway.ledger.models import RequestRow
from gateway.ledger.records import RequestRecord

ADMIN = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "test"}


@dataclass
class Result:
    writers: int
    offered_rows_per_s: int
    seconds: float
    rows: int
    committed_rows_per_s: float
    last_commit_lag_s: float


def _record(writer: int, n: int) -> RequestRecord:
    task = f"w{writer}-task-{n // 10}"
    return RequestRecord(
        request_id=f"w{writer}-{n}", task_id=task, team=f"team-{n % 16}", project="p",
        model_alias="chat", backend="vllm", provider="openai", upstream_model="m",
        tier_requested="standard", tier_served="standard", prompt_tokens=4000,
        cached_tokens=3000, completion_tokens=300, cost_input=Decimal("0.002"),
        cost_cached=Decimal("0.0003"), cost_output=Decimal("0.003"),
        cost_total=Decimal("0.0053"), duration_ms=1500, ttft_ms=200,
    )  # fmt: skip


async def _feed(writer: LedgerWriter, index: int, rate: int, seconds: float) -> None:
    """Submit `rate` rows a second in ten steps a second, as requests finishing would."""
    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(min(elapsed + 0.1, seconds) * rate)
        for n in range(sent, due):
            writer.submit(_record(index, n))
        sent = due
        await asyncio.sleep(0.1)
    for n in range(sent, int(seconds * rate)):  # a late wake-up must not drop the rest
        writer.submit(_record(index, n))


async def _committed(url: str) -> int:
    engine = make_engine(url)
    try:
        async with engine.connect() as connection:
            return int(await connection.scalar(select(func.count()).select_from(RequestRow)) or 0)
    finally:
        await engine.dispose()


async def measure(url: str, writers: int, rate: int, seconds: float, spool: Path) -> Result:
    await migrate(url)
    engines = [make_engine(url) for _ in range(writers)]
    ledger = [
        LedgerWriter(engine, WriterConfig(spool_dir=spool / f"w{n}", idle_timeout=None))
        for n, engine in enumerate(engines)
    ]
    for writer in ledger:
        await writer.start()
    started = time.monotonic()
    await asyncio.gather(*(_feed(w, n, rate, seconds) for n, w in enumerate(ledger)))
    fed = time.monotonic()
    total = writers * int(seconds * rate)
    while sum(w.stats().rows_written for w in ledger) < total and time.monotonic() - fed < 120:
        await asyncio.sleep(0.02)
    done = time.monotonic()
    for writer in ledger:
        await writer.close()
    for engine in engines:
        await engine.dispose()
    rows = await _committed(url)
    return Result(
        writers, writers * rate, round(done - started, 2), rows,
        round(rows / (done - started), 1), round(done - fed, 2),
    )  # fmt: skip


async def run(writers: int, rate: int, seconds: float) -> Result:
    name = f"farebox_capacity_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(**ADMIN, timeout=5)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with tempfile.TemporaryDirectory(prefix="farebox-capacity-") as spool:
            url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
            return await measure(url, writers, rate, seconds, Path(spool))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000, help="rows a second per writer")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        result = asyncio.run(run(args.writers, args.rate, args.seconds))
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"PostgreSQL at 127.0.0.1:5432 is unreachable: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(
            f"{result.writers} writers offered {result.offered_rows_per_s} rows/s for "
            f"{args.seconds} s: {result.rows} rows committed in {result.seconds} s "
            f"({result.committed_rows_per_s} rows/s), the last {result.last_commit_lag_s} s "
            "after the last submission"
        )
    expected = args.writers * int(args.seconds * args.rate)
    return 0 if result.rows == expected else 1


if __name__ == "__main__":
    sys.exit(main())
