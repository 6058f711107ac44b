"""The start-up goal says how long serve's imports take and whether they compiled."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hotpath import _import_seconds
from hotpath_goals import FB, Results, goals


def _start_goal(results: Results) -> tuple[str, str, str]:
    (goal,) = [goal for goal in goals(results) if goal.name.startswith("first request")]
    return goal.measured, goal.verdict, goal.bound


def test_the_import_probe_times_a_real_import_and_counts_its_modules() -> None:
    measured = _import_seconds()
    assert measured is not None
    seconds, (missing, total) = measured
    assert seconds > 0 and total > 500  # serve's imports: hundreds of modules
    assert 0 <= missing <= total


def test_missing_bytecode_is_named_in_what_bounds_start_up() -> None:
    results = Results(ready_s={FB: 2.5}, import_s=2.2, import_uncompiled=(942, 1137))
    measured, verdict, bound = _start_goal(results)
    assert (measured, verdict) == ("2.5 s", "missed by 1 s")
    assert bound.startswith("farebox serve's imports alone take 2.20 s on the gateway core")
    assert "942 of its 1137 modules have no bytecode" in bound
    results.import_uncompiled = (0, 1137)
    assert _start_goal(results)[2].endswith("(all 1137 modules from bytecode)")
