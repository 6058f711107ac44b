"""A real `farebox serve` answers chat without the routers no chat request needs (nor
anyio's backend, gateway/warmup.py), then every route once asked (gateway/api/routers.py),
and builds FastAPI's OpenAPI models only for /openapi.json (gateway/serve_imports.py
`deferred_model_builds`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.api.routers import DEFERRED
from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.e2e.test_serve_imports import DUMP_ON_SIGNAL
from tests.servers import ServerThread, free_port, running

# anyio's asyncio backend: the warm-up of a deferred app leaves it to the first routed request.
ANYIO_BACKEND = "anyio._backends._asyncio"


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def _modules(process: subprocess.Popen[bytes], out: Path) -> set[str]:
    out.unlink(missing_ok=True)
    process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    return set(out.read_text(encoding="utf-8").split())


def _first_chat(base: str, process: subprocess.Popen[bytes]) -> None:
    """Post a chat request until one is answered 200 (only chat requests reach the gateway)."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    deadline = time.monotonic() + 120  # a loaded box: see tests.servers.wait_ready
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("farebox serve never answered a chat request")


def _streamed_chat(base: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as reply:
        assert reply.status_code == 200
        assert "[DONE]" in reply.read().decode()


def test_serve_includes_the_deferred_routers_on_first_use(
    tmp_path: Path, sim: ServerThread
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(DUMP_ON_SIGNAL)
    text = (
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim.url}/v1\n"
    )
    (tmp_path / "farebox.yaml").write_text(text)
    out = tmp_path / "modules.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(tmp_path / "farebox.yaml"),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=os.pathsep.join([str(probe), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        SERVE_MODULES_OUT=str(out),
    )
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _first_chat(base, process)  # as bench/first_request.py: no other request before
        _streamed_chat(base)
        before = _modules(process, out)
        assert "gateway.api.health" in before and "gateway.api.chat" in before
        assert not DEFERRED & before
        assert ANYIO_BACKEND not in before  # neither chat request entered an anyio scope
        assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200  # the first routed
        assert httpx.get(f"{base}/v1/spend", timeout=30).status_code == 200
        assert httpx.get(f"{base}/ui", timeout=30).status_code == 200
        after = _modules(process, out)
        assert after >= DEFERRED and ANYIO_BACKEND in after
        served = httpx.get(f"{base}/openapi.json", timeout=30).text
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    here = create_app(Settings(data_dir=tmp_path / "here"), parse_config(text)).openapi()
    # The same document, every key in the same order (json.dumps keeps the order).
    assert json.dumps(json.loads(served)) == json.dumps(json.loads(json.dumps(here)))
