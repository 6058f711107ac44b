"""The chat front benchmark still runs end to end (its numbers are read by people, not tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chat_front.py"


def test_the_benchmark_runs_and_reports_every_stack() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "50", "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")][2:]
    assert [row.split(" | ")[0] for row in rows] == [
        "| front",
        "| lane",
        "| fastapi-route",
        "| fastapi-route+telemetry",
        "| bare",
    ]
