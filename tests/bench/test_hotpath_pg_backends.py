"""bench/hotpath.py reads the CPU of the PostgreSQL backends serving a target's ledger.

In the PostgreSQL + Redis rows the database server runs on the same two cores as the
gateway and the load; its backends' CPU is shown beside the load's. Here a real backend
of a database of the test's own is found by its process title and its ticks grow with
the work it does; a backend of another database is not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import asyncpg

from tests.pg import PG_HOST, PG_PORT, PG_USER, fresh_pg_database

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hotpath_load import _grown
from hotpath_procs import postgres_backend_ticks


async def _connect(database: str) -> asyncpg.Connection:
    return await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=database)


async def test_the_backends_of_the_targets_database_are_found_and_their_cpu_read() -> None:
    async with (
        fresh_pg_database("farebox_bench_pg") as name,
        fresh_pg_database("farebox_bench_other") as other,
    ):
        ours, theirs = await _connect(name), await _connect(other)
        try:
            pid, other_pid = (
                await ours.fetchval("SELECT pg_backend_pid()"),
                await theirs.fetchval("SELECT pg_backend_pid()"),
            )
            before = postgres_backend_ticks(name)
            assert pid in before and other_pid not in before
            # ~0.2-0.5 s of the backend's CPU: many ticks of 10 ms
            await ours.fetchval("SELECT count(*) FROM generate_series(1, 3000000)")
            after = postgres_backend_ticks(name)
            assert _grown(before, after) >= 5
            assert other_pid in postgres_backend_ticks(other)
        finally:
            await ours.close()
            await theirs.close()


def test_a_backend_that_started_meanwhile_counts_all_of_its_ticks() -> None:
    assert _grown({1: 10, 2: 5}, {1: 14, 3: 7}) == 4 + 7
