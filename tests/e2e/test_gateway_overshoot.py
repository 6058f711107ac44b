"""The issue's overshoot bound through the whole gateway: two `farebox serve` replicas on
one real Redis, 64 concurrent openai SDK clients spending one team budget (one run of
`bench/gateway_overshoot.py`, which reports the same over repeated runs)."""

from __future__ import annotations

import importlib.util
import sys
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest

from tests.redis_service import require_redis

pytestmark = pytest.mark.redis
BENCH = Path(__file__).resolve().parents[2] / "bench" / "gateway_overshoot.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gateway_overshoot", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gateway_overshoot", module)
    spec.loader.exec_module(module)
    return module


def test_two_replicas_and_64_clients_overshoot_at_most_one_worst_case() -> None:
    require_redis()
    limit = Decimal("0.05")
    (run,) = _bench().measure(runs=1, clients=64, attempts=12, limit=limit, seed=7)
    overshoot, bound = Decimal(run.overshoot_usd), Decimal(run.max_worst_case_usd)
    assert overshoot <= bound, run  # the bound
    # No served request cost more than it held: the worst case is an upper bound here.
    assert run.above_reservation == 0, run
    # The engine's count is the ledgers' (both replicas'), to 1e-10 USD.
    assert Decimal(run.ledger_usd) == Decimal(run.engine_spent_usd), run
    # The budget was fought over (refusals while others held money) and spent: a client
    # stops only when nothing is held and its request does not fit.
    assert run.refused > 0 and run.served > 0, run
    assert Decimal(run.ledger_usd) >= limit - bound, run
