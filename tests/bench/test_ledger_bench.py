"""The ledger benchmark still runs end to end on a small database: the generator's rollups
equal the rows, and every query of the results table answers (its times are not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg import fresh_pg_database, pg_url

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.postgres
async def test_fill_and_queries_run_and_the_rollups_match(tmp_path: Path) -> None:
    async with fresh_pg_database("farebox_bench_test") as name:
        url = pg_url(name).replace("+asyncpg", "")
        fill = [sys.executable, str(BENCH / "ledger_fill.py"), "--url", url, "--keep",
                "--rows", "3000", "--days", "3", "--check"]  # fmt: skip
        done = subprocess.run(fill, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "rollup rows differing from the base table: 0" in done.stdout
        out = tmp_path / "results.md"
        bench = [sys.executable, str(BENCH / "ledger_queries.py"), "--url", url, "--rows", "3000",
                 "--runs", "1", "--base", "--out", str(out)]  # fmt: skip
        done = subprocess.run(bench, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        text = out.read_text()
        assert "Target: every page and report query answers in under **1 s**" in text
        assert "| spend by team, whole ledger |" in text and "error" not in text
