"""The issue's bound: two replicas on one real Redis and 64 concurrent clients spending one
budget never settle more past the limit than the largest single worst case (runs of
`bench/budget_overshoot.py`, which reports the same over more runs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from tests.redis_service import require_redis
from tests.tenants.conftest import drop_keys

pytestmark = pytest.mark.redis
BENCH = Path(__file__).resolve().parents[2] / "bench" / "budget_overshoot.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("budget_overshoot", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("budget_overshoot", module)
    spec.loader.exec_module(module)
    return module


bench = _bench()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_two_replicas_and_64_clients_overshoot_at_most_one_worst_case(seed: int) -> None:
    url, namespace = require_redis(), f"test-{uuid.uuid4().hex}"
    replicas = [bench.RedisLimiter.from_url(url, namespace, bench.PATIENT) for _ in range(2)]
    try:
        run = await bench.spend_one_budget(replicas, Decimal(10), 64, 20, seed)
    finally:
        await drop_keys(replicas[0])
        for replica in replicas:
            await replica.aclose()
    overshoot, bound = Decimal(run.overshoot_usd), Decimal(run.max_worst_case_usd)
    assert overshoot <= bound, run  # the bound
    assert run.within_bound
    # Every settle is at most its reservation, so holding first leaves no overshoot at all.
    assert overshoot == 0, run
    # Exact books: what the clients settled is what Redis counted, to the 1e-10 USD.
    assert Decimal(run.settled_usd) == Decimal(run.engine_spent_usd)
    # The budget was fought over and spent: a request ends refused only when nothing else
    # is held, so the spend is then within one worst case of the limit.
    assert run.refused > 0 and Decimal(run.settled_usd) >= Decimal(10) - bound


def test_the_benchmark_reports_each_run_and_both_paths_as_json() -> None:
    require_redis()
    small = ["--runs", "2", "--clients", "8", "--attempts", "5", "--samples", "20"]
    run = subprocess.run(
        [sys.executable, str(BENCH), *small, "--json", "--no-write"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = orjson.loads(run.stdout)
    assert [r["overshoot_usd"] for r in report["runs"]] == ["0", "0"]
    assert set(report["reserve_settle"]) == {
        "memory, one_key",
        "memory, typical_request",
        "redis, one_key",
        "redis, typical_request",
    }
    assert all(cost["p50_us"] > 0 for cost in report["reserve_settle"].values())
