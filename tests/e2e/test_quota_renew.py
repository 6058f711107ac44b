"""A stream that outlives the budget hold keeps it: the gateway renews live holds (a real
gateway with a short FAREBOX_BUDGET_HOLD_S, the simulator held back past it, real Redis,
the openai SDK)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import openai
import pytest

from gateway.pipeline.quota import RESERVED_HEADER
from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_quota import CAP, MESSAGES, _ledger, _start, _team, _usage

pytestmark = pytest.mark.redis
HOLD_S = 1.0  # renewed every third of a second; the stream takes four of them


def _stream(client: openai.OpenAI, team: str) -> tuple[Decimal, int]:
    """The worst case the gateway reserved, and the chunks the stream brought."""
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=CAP,
        stream=True,
        extra_headers={"X-Farebox-Team": team},
    )
    reserved = Decimal(raw.headers[RESERVED_HEADER])
    return reserved, sum(1 for _ in raw.parse())


def test_a_stream_longer_than_the_hold_keeps_it_until_it_is_settled(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    tenants = f"  teams:\n    {team}: {{budget: {{daily_usd: 1}}}}"
    gateway = _start(make_gateway, sim, tmp_path, tenants, budget_hold_s=HOLD_S)
    sim.fault(delay_s=HOLD_S * 4, count=1)
    with ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(_stream, gateway.sdk(), team)
        time.sleep(HOLD_S * 2.5)  # well past the hold's first deadline
        assert not streaming.done()
        spent, held = _usage(team)
        reserved, chunks = streaming.result(timeout=60)
    assert chunks > 0
    assert (spent, held) == (0, reserved)  # still held while the stream ran
    spent, held = _usage(team)
    assert held == 0 and 0 < spent < reserved
    gateway.stop()
    rows, booked = _ledger(gateway)
    assert rows == 1 and spent == booked  # settled once, to what the ledger booked
