"""Whether the simulator has a request yet: for tests of work done while the upstream reads."""

from __future__ import annotations

import time

import httpx

from tests.conftest import SimControl


def upstream_had_it(sim: SimControl, before: int) -> bool:
    """Whether the simulator logs a request past `before` within a second (the gateway's
    loop is held meanwhile: only a request already written can reach it)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if len(httpx.get(f"{sim.url}/sim/requests", timeout=5).json()) > before:
            return True
        time.sleep(0.02)
    return False
