"""bench/pipeline_cpu.py runs end to end, briefly: CPU per request is counted beside minproxy.

The numbers are read by people (docs/performance.md), not judged here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pipeline_cpu.py"


def test_a_short_run_measures_farebox_beside_minproxy() -> None:
    command = [sys.executable, str(BENCH), "-n", "60", "--warm", "20", "-c", "4", "--stream"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
    measured = {row["name"]: row for row in rows if "name" in row}
    assert set(measured) == {"minproxy", "farebox"}
    for row in measured.values():
        assert row["errors"] == {} and row["sent"] == 60  # the measured run: no warm-up
        assert row["cpu_ms_per_req"] > 0 and row["latency_ms"]["p50"] > 0
    assert rows[-1]["ratio"] > 0
