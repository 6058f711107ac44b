"""What `farebox serve` no longer imports to serve a route that litellm does not serve.

httpx is litellm's HTTP client only (the native adapters use aiohttp and the gateway's own
HTTP/1.1 client): a gateway whose routes are all native never loads it (25 modules, 12-18
ms of CPU at every start). The process is a real `farebox serve` (tests/e2e/
test_serve_imports.py's probe), after a chat request, a ledger read and a 404 task read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.settings import Timeouts
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from gateway.upstream.registry import Upstreams
from tests.e2e.test_serve_imports import _modules_after_serving
from tests.servers import ServerThread, running


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def test_a_gateway_without_litellm_routes_never_imports_httpx(
    tmp_path: Path, sim: ServerThread
) -> None:
    modules, statuses = _modules_after_serving(tmp_path, sim.url)
    assert statuses == [200, 200, 404]
    assert "gateway.upstream.registry" in modules and "aiohttp" in modules  # it served
    assert not {m for m in modules if m == "httpx" or m.startswith("httpx.")} - {"httpx._main"}


def test_the_litellm_adapter_still_gets_its_httpx_client() -> None:
    """The registry imports httpx where it builds litellm's adapter (litellm stays unloaded)."""
    upstreams = Upstreams(None, None, Timeouts())
    adapter = upstreams._litellm_adapter()
    assert isinstance(adapter._client, httpx.AsyncClient)
    assert upstreams._litellm_adapter() is adapter  # built once
    asyncio.run(upstreams.aclose())
