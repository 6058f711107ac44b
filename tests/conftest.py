"""Fixtures shared by every test: a clean environment, the simulator and the gateway."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import certifi
import httpx
import pytest

from gateway.heap import freeze_imports
from tests.servers import ServerThread, running


def _one_root_bundle() -> str:
    """A CA bundle with one of certifi's roots, for every HTTP client the tests make.

    Each httpx client (and so each `openai.OpenAI`) loads its CA bundle when it is made:
    certifi's 150 roots cost 30-100 ms of CPU a client, minutes over the suite, and every
    test connection is plain HTTP on loopback. Subprocesses inherit it with the environment.
    """
    pem = Path(certifi.where()).read_text(encoding="ascii")
    end = "-----END CERTIFICATE-----"
    first = pem[pem.index("-----BEGIN CERTIFICATE-----") : pem.index(end) + len(end)]
    path = Path(tempfile.gettempdir()) / f"farebox-tests-ca-{os.getuid()}.pem"
    if not path.exists() or path.read_text(encoding="ascii") != first + "\n":
        partial = path.with_suffix(f".{os.getpid()}")
        partial.write_text(first + "\n", encoding="ascii")
        partial.replace(path)  # atomic: xdist workers write the same bytes
    return str(path)


os.environ["SSL_CERT_FILE"] = _one_root_bundle()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Collect as rarely while collecting: importing ~340 test modules and what they import
    (litellm among them) made five full passes of a growing heap, 1.2 s of a collection's
    7 s of CPU (0.65-0.85 s a pass in a loaded run's workers)."""
    freeze_imports()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Run each worker's collector as `farebox serve` runs its own (`freeze_imports`): what
    importing and collecting made is frozen, and young collections come every 20,000 new
    objects, not 700.

    Each worker holds ~1 GB by its end; with CPython's defaults its collector ran ~30,000
    times and walked the whole heap 130-220 times, 13-24 s of each worker's ~300 s, single
    passes up to 2.7 s, which stalled the gateways that tests run in the same process (a
    budget hold's renewals missed past the hold once). The gateways' own start-up freezes
    again what the tests made, as before.
    """
    freeze_imports()


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
