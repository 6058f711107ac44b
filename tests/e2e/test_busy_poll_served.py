"""A served gateway busy-polls while its client and upstream answer quickly, one request at a
time, stops once they pause, and never with `busy_poll_us: 0` (gateway/busy_poll.py).

The upstream is tests/e2e/test_upstream_reuse.py's raw keep-alive server (answers at once);
the client sends one request at a time on one connection, as a benchmark's client at
concurrency 1 does. The window is 10 ms here, wide enough for a loaded test box."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.busy_poll import MAX_WINDOWS, BusyPoll
from gateway.config import GatewayConfig
from gateway.settings import Settings
from tests.e2e.test_upstream_reuse import CountingUpstream
from tests.servers import ServerThread

WINDOW_US = 10_000


@pytest.fixture(scope="module")
def upstream() -> Iterator[CountingUpstream]:
    server = CountingUpstream().start()
    yield server
    server.stop()


def _gateway(upstream: CountingUpstream, data_dir: Path, busy_poll_us: int) -> ServerThread:
    route = {"provider": "openai", "base_url": f"http://127.0.0.1:{upstream.port}/v1"}
    model = {**route, "model": "m", "family": "vllm"}
    config = GatewayConfig.model_validate({"models": {"m": model}})
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)
        settings = Settings(data_dir=data_dir, busy_poll_us=busy_poll_us)
        # With `settings`: Farebox's own server protocol and uvloop, as `farebox serve`.
        return ServerThread(create_app(settings, config), settings).start()


def _send(url: str, n: int) -> None:
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            stream = i % 2 == 1
            body = {"model": "m", "messages": [{"role": "user", "content": "same-write"}]}
            response = client.post(f"{url}/v1/chat/completions", json=body | {"stream": stream})
            assert response.status_code == 200, response.text
            assert response.text.rstrip().endswith("data: [DONE]") if stream else response.json()


def _metrics(url: str) -> dict[str, float]:
    """The unlabelled samples of GET /metrics, by name."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    samples = (line.split(" ") for line in text.splitlines() if line and line[0] != "#")
    return {fields[0]: float(fields[1]) for fields in samples if len(fields) == 2}


def _poll(server: ServerThread) -> Any:
    return getattr(server.server.config.app.state, "busy_poll", None)


def test_quick_answers_one_at_a_time_keep_the_loop_awake_and_a_pause_ends_it(
    upstream: CountingUpstream, tmp_path: Path
) -> None:
    server = _gateway(upstream, tmp_path, WINDOW_US)
    try:
        poll = _poll(server)
        assert isinstance(poll, BusyPoll) and poll.window == WINDOW_US / 1e6
        started = time.perf_counter()
        _send(server.url, 60)
        assert poll.spins > 0  # the reads came within the window: the loop spun
        time.sleep((MAX_WINDOWS + 2) * poll.window)  # no I/O for longer than a spin lasts
        assert not poll._spinning  # idle: asleep again
        assert poll.score > 0.5
        spins, idle, backoffs = poll.spins, poll.idle_s, poll.backoffs
        assert 0 <= idle < time.perf_counter() - started  # quiet turns: none on a loaded box
        exposed = _metrics(server.url)
        # The scrape's own I/O may spin (and, on a loaded box, back off) before or after
        # the scrape reads the counts: between what they were before it and after it.
        assert spins <= exposed["farebox_busy_poll_spins_total"] <= poll.spins
        assert idle <= exposed["farebox_busy_poll_idle_seconds_total"] <= poll.idle_s
        assert backoffs <= exposed["farebox_busy_poll_backoffs_total"] <= poll.backoffs
    finally:
        server.stop()


def test_off_no_poller_and_every_request_served(upstream: CountingUpstream, tmp_path: Path) -> None:
    server = _gateway(upstream, tmp_path, 0)
    try:
        assert _poll(server) is None
        _send(server.url, 10)
        assert _metrics(server.url)["farebox_busy_poll_spins_total"] == 0
    finally:
        server.stop()
