"""bench/api_c1.py runs end to end on a few requests per API and fills every row.

The numbers are read by people, not judged here: the test checks each API was served
(200s, or the bench fails) and timed, and that *added* is the gateway's percentile less
the direct one of the same round.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "api_c1.py"


def test_each_api_is_timed_against_the_direct_baseline() -> None:
    command = [sys.executable, str(BENCH), "-n", "30", "--pairs", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for api in ("chat", "messages", "messages-native", "responses"):
        direct = row["direct-messages" if api == "messages-native" else "direct"]
        assert 0 < direct["p50"] <= direct["p99"]
        timed = row[api]
        assert 0 < timed["p50"] <= timed["p99"]
        assert abs(timed["added_p50"] - (timed["p50"] - direct["p50"])) < 0.002
        # Forwarded natively: the mock answered each on its Messages wire; translated: none.
        assert timed["upstream_messages"] == (30 if api == "messages-native" else 0)


def test_an_api_the_mock_cannot_serve_is_refused() -> None:
    command = [sys.executable, str(BENCH), "-n", "5", "--api", "completions"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "the mock serves chat completions and messages" in done.stderr
