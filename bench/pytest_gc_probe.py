"""A pytest plugin that reports each process's garbage-collector time (the CI-time probe).

Run: `PYTHONPATH=bench .venv/bin/pytest -q -n 4 --dist loadfile -p pytest_gc_probe` (or
without -n). Each process (each xdist worker) prints, and appends to
`$GC_PROBE_OUT` (default `farebox-gc-probe.jsonl` in the temporary directory), its collections and
their wall time per generation, the longest pass, its peak RSS, and the passes over
0.15 s with the test that was running (`PYTEST_CURRENT_TEST`; none: collection or
between tests). docs/performance.md ("CI time") quotes it.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import tempfile
import time
from typing import Any

import pytest

LONG_S = 0.15

_totals: dict[str, Any] = {"seconds": [0.0, 0.0, 0.0], "count": [0, 0, 0], "longest": 0.0}
_long: list[tuple[float, int, str]] = []
_started = [0.0]


def _observe(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took, generation = time.perf_counter() - _started[0], info["generation"]
    _totals["seconds"][generation] += took
    _totals["count"][generation] += 1
    _totals["longest"] = max(_totals["longest"], took)
    if took > LONG_S:
        _long.append((round(took, 3), generation, os.environ.get("PYTEST_CURRENT_TEST", "")))


gc.callbacks.append(_observe)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not any(_totals["count"]):
        return
    report = {
        "pid": os.getpid(),
        **_totals,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "long_passes": _long,
    }
    default = os.path.join(tempfile.gettempdir(), "farebox-gc-probe.jsonl")
    with open(os.environ.get("GC_PROBE_OUT", default), "a", encoding="utf-8") as out:
        out.write(json.dumps(report) + "\n")
    seconds = sum(_totals["seconds"])
    print(f"\ngc probe {os.getpid()}: {seconds:.1f} s in {sum(_totals['count'])} collections")
