"""Fixtures shared by every test: a clean environment, the simulator and the gateway."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from tests.servers import ServerThread, running


@pytest.fixture(autouse=True)
def _scrub_farebox_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's FAREBOX_* settings."""
    for name in list(os.environ):
        if name.startswith("FAREBOX_"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def sim_server() -> Iterator[ServerThread]:
    """The simulator on a real port, shared by the session (reset per test by `sim`)."""
    from gateway.sim.app import create_sim_app
    from gateway.sim.config import default_config

    with running(create_sim_app(default_config())) as server:
        yield server


@pytest.fixture
def sim(sim_server: ServerThread) -> Iterator[SimControl]:
    """Control of the shared simulator, reset before each test."""
    control = SimControl(sim_server.url)
    control.reset()
    yield control
    control.close()


class SimControl:
    """Reads and programs the simulator through its /sim/ endpoints."""

    def __init__(self, url: str):
        self.url = url
        self.base_url = f"{url}/v1"
        self.http = httpx.Client(base_url=url, timeout=10)

    def reset(self) -> None:
        self.http.post("/sim/reset").raise_for_status()

    def requests(self) -> list[dict[str, object]]:
        response = self.http.get("/sim/requests")
        response.raise_for_status()
        data = response.json()
        return list(data["requests"] if isinstance(data, dict) else data)

    def fault(self, **spec: object) -> None:
        self.http.post("/sim/faults", json=spec).raise_for_status()

    def close(self) -> None:
        self.http.close()
