"""A real `farebox serve` with a probe inside: a `sitecustomize` on its path that writes
what it saw (its modules, its collections, its forks) to a file on SIGUSR2.

Tests read a serving process's own state this way without changing how it starts: the
probe is the interpreter's, loaded before gateway.cli, and the process is the one a user
runs (`python -m gateway serve`, the simulator as its upstream, a SQLite ledger in
`tmp_path / "data"`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import free_port, wait_ready


@dataclass(frozen=True)
class ProbedServe:
    port: int
    process: subprocess.Popen[bytes]
    out: Path  # where the probe writes on SIGUSR2 (its path is in the probe's env var)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def chat(self) -> int:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        return httpx.post(f"{self.base}/v1/chat/completions", json=body, timeout=30).status_code

    def dump(self) -> str:
        """Signal the probe and return what it wrote."""
        self.process.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not self.out.exists() and time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        return self.out.read_text(encoding="utf-8")


@contextmanager
def probed_serve(tmp_path: Path, sim_url: str, probe: str, out_var: str) -> Iterator[ProbedServe]:
    """`farebox serve` on a free port with `probe` as its sitecustomize, model `chat` routed
    to the simulator at `sim_url`; the probe finds its output path in env var `out_var`."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(probe)
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim_url}/v1\n"
    )
    out = tmp_path / "probe.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(config),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),  # the SQLite ledger: data/farebox.db
        PYTHONPATH=os.pathsep.join([str(probe_dir), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    env[out_var] = str(out)
    port = free_port()
    with (tmp_path / "stdout.txt").open("w") as stdout:  # not a terminal, as under a service
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=stdout,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(port, process)
            yield ProbedServe(port, process, out)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
