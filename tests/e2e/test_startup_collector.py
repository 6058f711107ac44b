"""`farebox serve` runs no garbage collection while it imports, and serves with one running.

gateway/serve_imports.py pauses the collector from gateway.cli's first import until
`serve` has frozen its imports: the ~280 collections that importing set off (150-190 ms of
CPU before the first request) freed nothing worth it. The process is a real `farebox
serve`; a `sitecustomize` on its path counts the collections from the interpreter's start
and writes them, with the collector's state, on SIGUSR2, after a chat request.
"""

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

from gateway.heap import YOUNG_THRESHOLD
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.servers import ServerThread, free_port, running, wait_ready

COUNT_COLLECTIONS = """\
import gc, json, os, signal

_runs = [0, 0, 0]

def _count(phase, info):
    if phase == "start":
        _runs[info["generation"]] += 1

gc.callbacks.append(_count)

def _dump(*_, path=os.environ["SERVE_GC_OUT"]):
    state = {"enabled": gc.isenabled(), "threshold": gc.get_threshold(), "runs": _runs}
    with open(path + ".part", "w", encoding="utf-8") as out:
        json.dump(state, out)
    os.replace(path + ".part", path)

signal.signal(signal.SIGUSR2, _dump)
"""


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def _collector_after_serving(tmp_path: Path, sim_url: str) -> dict[str, object]:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(COUNT_COLLECTIONS)
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim_url}/v1\n"
    )
    out = tmp_path / "gc.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(config),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=os.pathsep.join([str(probe), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        SERVE_GC_OUT=str(out),
    )
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
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=30).status_code == 200
        process.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        state: dict[str, object] = json.loads(out.read_text())
        return state
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_serve_collects_nothing_while_importing_and_serves_with_the_collector_on(
    tmp_path: Path, sim: ServerThread
) -> None:
    state = _collector_after_serving(tmp_path, sim.url)
    assert state["enabled"] is True
    assert state["threshold"] == [YOUNG_THRESHOLD, 10, 10]  # freeze_imports' young threshold
    runs = state["runs"]
    assert isinstance(runs, list)
    # Before the pause: ~280 (256 young, 23 middle, 2 full) by the first request. Now: the
    # interpreter's own start, the lifespan's freeze_heap (a full one), a few young ones.
    assert runs[0] + runs[1] < 20, runs
    assert runs[2] <= 2, runs
