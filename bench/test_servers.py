"""What one in-process test server costs the suite: build, start and stop, per gateway.

Run: `python bench/test_servers.py [--count 8]` from the repository root. Each round
builds an app on the tests' routes (`tests.e2e.conftest.sim_config`), starts it with
`tests.servers.ServerThread`, asks it for /healthz, and stops it; printed per round: the
wall and CPU milliseconds of each step (CPU: this process's, the server thread included).
The first round pays the lazy imports. docs/performance.md ("CI time") quotes it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from gateway.app import create_app
from gateway.settings import Settings
from tests.e2e.conftest import sim_config
from tests.servers import ServerThread


def _step(timings: list[str], name: str, started: tuple[float, float]) -> tuple[float, float]:
    now = (time.perf_counter(), time.process_time())
    wall, cpu = ((b - a) * 1000 for a, b in zip(started, now, strict=True))
    timings.append(f"{name} {wall:.0f}/{cpu:.0f}")
    return now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=8, help="servers built one after another")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    data = Path(tempfile.mkdtemp(prefix="farebox-bench-servers-"))
    print("ms wall/CPU per step")
    for index in range(args.count):
        timings: list[str] = []
        started = (time.perf_counter(), time.process_time())
        settings = Settings(data_dir=data / f"gateway-{index}")
        app = create_app(settings, sim_config("http://127.0.0.1:9"))
        started = _step(timings, "build", started)
        server = ServerThread(app, settings).start()
        started = _step(timings, "start", started)
        httpx.get(f"{server.url}/healthz", timeout=10).raise_for_status()
        started = (time.perf_counter(), time.process_time())
        server.stop()
        _step(timings, "stop", started)
        print(f"round {index}: " + ", ".join(timings))


if __name__ == "__main__":
    main()
