"""bench/hotpath_mock.py, started for a test: perf-floor's instant upstream with Anthropic's
Messages API (bench/mock_messages.py), which writes a whole stream in one write."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
FLOOR = os.environ.get("FAREBOX_PERF_FLOOR") or str(ROOT.parent / "shared" / "perf-floor")


@contextmanager
def running_mock() -> Iterator[str]:
    """The mock's base URL (http://127.0.0.1:PORT) while it runs."""
    port = free_port()
    command = [sys.executable, str(ROOT / "bench" / "hotpath_mock.py"), "--port", str(port)]
    proc = subprocess.Popen(
        command, env=os.environ | {"FAREBOX_PERF_FLOOR": FLOOR}, stdout=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{base}/health", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("bench/hotpath_mock.py did not start") from None
                time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def answered(base: str) -> int:
    """How many /v1/messages requests the mock has answered."""
    return int(httpx.get(f"{base}/bench/connections", timeout=5).json()["messages"])
