"""What `farebox serve` no longer imports, and what it serves all the same.

httpx is litellm's HTTP client only (the native adapters use the gateway's own HTTP/1.1
client): a gateway whose routes are all native never loads it (25 modules, 12-18 ms of CPU
at every start), nor aiohttp (66 modules, ~100 ms), which it imports only for a URL with
credentials in it or to raise a failure as aiohttp's error (gateway/upstream/aio.py). pydantic.v1 was imported by FastAPI only to ask whether a
route's fields are v1 models (gateway/serve_imports.py): 23 modules, 15-25 ms. The process
is a real `farebox serve` (tests/e2e/test_serve_imports.py's probe), after a chat request,
a ledger read and a 404 task read.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings, Timeouts
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from gateway.upstream.http_stream import KEEPALIVE_S
from gateway.upstream.registry import Upstreams
from tests.e2e.test_serve_imports import DUMP_ON_SIGNAL, _modules_after_serving
from tests.serve_probe import probed_serve
from tests.servers import ServerThread, free_port, running, wait_ready


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def test_a_native_gateway_imports_no_httpx_h11_websockets_or_aiohttp(
    tmp_path: Path, sim: ServerThread
) -> None:
    modules, statuses = _modules_after_serving(tmp_path, sim.url)
    assert statuses == [200, 200, 404]
    assert "gateway.upstream.h1" in modules  # it served through the gateway's own client
    # aiohttp only for a URL with credentials or a failure's error types (upstream/aio.py)
    assert not {m for m in modules if m.split(".")[0] in {"aiohttp", "yarl", "multidict"}}


def test_an_idle_upstream_connection_closing_imports_no_aiohttp(
    tmp_path: Path, sim: ServerThread
) -> None:
    """A pooled connection closed while idle (the pool's keep-alive expiry at 4 s, the
    server's at 5 s) is no failure: nothing builds an aiohttp error for it."""
    with probed_serve(tmp_path, sim.url, DUMP_ON_SIGNAL, "SERVE_MODULES_OUT") as serve:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{serve.base}/v1/chat/completions"
        with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as streamed:
            assert streamed.status_code == 200 and list(streamed.iter_lines())
        assert serve.chat() == 200
        time.sleep(KEEPALIVE_S + 2.5)  # both connections expired and closed
        assert serve.chat() == 200  # a new connection
        modules = set(serve.dump().split())
    assert "gateway.upstream.h1" in modules
    assert not {m for m in modules if m.split(".")[0] in {"aiohttp", "yarl", "multidict"}}
    assert not {m for m in modules if m == "httpx" or m.startswith("httpx.")} - {"httpx._main"}
    # uvicorn's h11 protocol only where httptools is missing; no WebSocket library (ws="none").
    assert "httptools" in modules
    assert not {m for m in modules if m.split(".")[0] in {"h11", "websockets", "wsproto"}}
    assert "uvicorn.protocols.http.h11_impl" not in modules


def test_serve_never_imports_pydantic_v1_and_serves_the_same_openapi_schema(
    tmp_path: Path, sim: ServerThread
) -> None:
    modules, statuses = _modules_after_serving(tmp_path, sim.url)
    assert statuses == [200, 200, 404]
    assert not {m for m in modules if m.startswith("pydantic.v1.")}  # its 23 submodules
    served = _openapi_of_serve(tmp_path / "again", sim.url)
    config = parse_config(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim.url}/v1\n"
    )
    here = create_app(Settings(data_dir=tmp_path / "here"), config).openapi()  # v1 importable
    assert served == json.loads(json.dumps(here))


def _openapi_of_serve(tmp_path: Path, sim_url: str) -> dict[str, Any]:
    """/openapi.json of a real `farebox serve` on `sim_url`'s simulator."""
    tmp_path.mkdir()
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim_url}/v1\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(FAREBOX_CONFIG=str(config), FAREBOX_DATA_DIR=str(tmp_path / "data"))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, process)
        reply = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=30)
        assert reply.status_code == 200
        schema: dict[str, Any] = reply.json()
        return schema
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_the_litellm_adapter_still_gets_its_httpx_client() -> None:
    """The registry imports httpx where it builds litellm's adapter (litellm stays unloaded)."""
    upstreams = Upstreams(None, None, Timeouts())
    adapter = upstreams._litellm_adapter()
    assert isinstance(adapter._client, httpx.AsyncClient)
    assert upstreams._litellm_adapter() is adapter  # built once
    asyncio.run(upstreams.aclose())
