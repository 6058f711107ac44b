"""`farebox serve` runs its start-up steps (the ledger's migration, the price map's digest)
in one forked child, not one each: a fork and a child's exit of the started process cost
5-7 ms of CPU on the gateway's core. The process is a real `farebox serve`; a
`sitecustomize` counts its forks and writes the count on SIGUSR2, after a chat request
(which shows the ledger migrated and the digest installed: tests/e2e/test_serve_imports.py
checks that the serving process never parses the map)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.servers import ServerThread, free_port, running, wait_ready

COUNT_FORKS = """\
import os, signal

_forks = [0]
os.register_at_fork(before=lambda: _forks.__setitem__(0, _forks[0] + 1))

def _dump(*_, path=os.environ["SERVE_FORKS_OUT"]):
    with open(path + ".part", "w", encoding="utf-8") as out:
        out.write(str(_forks[0]))
    os.replace(path + ".part", path)

signal.signal(signal.SIGUSR2, _dump)
"""


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def test_serve_forks_one_child_for_its_start_up_steps(tmp_path: Path, sim: ServerThread) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(COUNT_FORKS)
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim.url}/v1\n"
    )
    out = tmp_path / "forks.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(config),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        PYTHONPATH=os.pathsep.join([str(probe), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        SERVE_FORKS_OUT=str(out),
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
        assert (tmp_path / "data" / "farebox.db").exists()  # migrated in the child
        process.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text() == "1"  # bbfb728: 2 (the migration's, the digest's)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
