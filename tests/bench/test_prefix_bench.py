"""The prefix benchmark still runs end to end (its numbers are read by people, not tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "prefix_bench.py"


def test_the_benchmark_runs_and_reports_every_case_both_ways() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "2", "--no-write"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table, _, comparison = done.stdout.partition("with the native locator off")
    for case in (
        "fingerprint only",
        "first-seen 1 MB agent history",
        "steady state",
        "whole stage",
    ):
        assert f"| {case}" in table
    # Every scan case appears once more in the pure-Python comparison, with a speed-up
    # for the whole scans only.
    assert comparison.count("| first-seen") == table.count("| first-seen") == 8
    assert comparison.count("x |") == 4
