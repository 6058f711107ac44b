"""SIGTERM to `farebox serve` with streams in flight: each finishes (or is cut at the grace
period), and each is in the ledger when the process has exited."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.servers import ServerThread, free_port, running, wait_ready

STREAMS = 6
OUTPUT_TOKENS = 24  # the simulator's default answer length
DECODE_MS = 80  # per token: each stream takes about 2 s, long enough to be cut short
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"


@pytest.fixture
def slow_sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig(decode_ms_per_token=DECODE_MS))) as server:
        yield server


def _serve(tmp_path: Path, sim_url: str, grace_s: float) -> tuple[subprocess.Popen[bytes], int]:
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"models:\n  chat:\n    provider: openai\n    model: sim-chat\n    base_url: {sim_url}/v1\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(config),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        FAREBOX_SHUTDOWN_GRACE_S=str(grace_s),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_ready(port, process)
    return process, port


class Stream(threading.Thread):
    """One streamed chat (or Messages) request, read to the end; `started` once its first
    event arrived."""

    def __init__(self, port: int, path: str = CHAT) -> None:
        super().__init__()
        self.port = port
        self.path = path
        self.started = threading.Event()
        self.body = b""
        self.request_id = ""
        self.error: Exception | None = None

    def run(self) -> None:
        body: dict[str, object] = {
            "model": "chat",
            "messages": [{"role": "user", "content": "tell me a story"}],
            "stream": True,
            "max_tokens": 64,
        }
        if self.path == CHAT:
            body["stream_options"] = {"include_usage": True}
        url = f"http://127.0.0.1:{self.port}{self.path}"
        try:
            with httpx.stream("POST", url, json=body, timeout=60) as response:
                self.request_id = response.headers["x-request-id"]
                for chunk in response.iter_bytes():
                    self.body += chunk
                    self.started.set()
        except Exception as exc:
            self.error = exc
        finally:
            self.started.set()


def _ledger_rows(database: Path) -> dict[str, tuple[int, int]]:
    """request_id -> (status_code, completion_tokens) of every row in the ledger."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT request_id, status_code, completion_tokens FROM requests"
        ).fetchall()
    return {request_id: (status, tokens) for request_id, status, tokens in rows}


def _refuses(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
    except httpx.ConnectError:
        return True
    except httpx.HTTPError:
        return False
    return False


def _sigterm_mid_streams(
    tmp_path: Path, sim_url: str, grace_s: float, path: str = CHAT
) -> list[Stream]:
    """Start the streams, SIGTERM once each has begun; return them once the gateway exited."""
    process, port = _serve(tmp_path, sim_url, grace_s)
    streams = [Stream(port, path) for _ in range(STREAMS)]
    try:
        for stream in streams:
            stream.start()
        for stream in streams:
            assert stream.started.wait(timeout=30), "a stream never started"
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not _refuses(port):  # new connections are turned away while streams drain
            assert time.monotonic() < deadline, "the gateway still accepts after SIGTERM"
            time.sleep(0.05)
        for stream in streams:
            stream.join(timeout=60)
        # uvicorn re-raises the signal once it has shut down, so a supervisor sees it.
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return streams


def test_sigterm_lets_streams_finish_and_books_every_one(
    tmp_path: Path, slow_sim: ServerThread
) -> None:
    streams = _sigterm_mid_streams(tmp_path, slow_sim.url, grace_s=30)
    for stream in streams:
        assert stream.error is None, stream.error
        assert stream.body.endswith(b"data: [DONE]\n\n"), stream.body[-200:]
    rows = _ledger_rows(tmp_path / "data" / "farebox.db")
    assert rows == {stream.request_id: (200, OUTPUT_TOKENS) for stream in streams}


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_streams_cut_at_the_grace_period_are_still_booked(
    tmp_path: Path, slow_sim: ServerThread, path: str
) -> None:
    streams = _sigterm_mid_streams(tmp_path, slow_sim.url, grace_s=0.5, path=path)
    assert all(isinstance(stream.error, httpx.RemoteProtocolError) for stream in streams)
    rows = _ledger_rows(tmp_path / "data" / "farebox.db")
    assert set(rows) == {stream.request_id for stream in streams}
    # Booked as cut by the gateway (499), with the tokens the client did receive.
    assert all(status == 499 and 0 < tokens < OUTPUT_TOKENS for status, tokens in rows.values())


class Whole(threading.Thread):
    """One non-streamed chat (or Messages) request; the status and error it got."""

    def __init__(self, port: int, path: str) -> None:
        super().__init__()
        self.port = port
        self.path = path
        self.status: int | None = None
        self.error: dict[str, object] = {}
        self.body: dict[str, object] = {}

    def run(self) -> None:
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": "tell me a story"}],
            "max_tokens": 64,
        }
        url = f"http://127.0.0.1:{self.port}{self.path}"
        response = httpx.post(url, json=body, timeout=60)
        self.status, self.body = response.status_code, response.json()
        self.error = response.json()["error"]


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_whole_requests_cut_at_the_grace_period_are_still_booked(
    tmp_path: Path, slow_sim: ServerThread, path: str
) -> None:
    process, port = _serve(tmp_path, slow_sim.url, grace_s=0.5)
    sim = httpx.Client(base_url=slow_sim.url, timeout=10)
    calls = [Whole(port, path) for _ in range(STREAMS)]
    try:
        for call in calls:
            call.start()
        deadline = time.monotonic() + 30
        while len(sim.get("/sim/requests").json()) < STREAMS:
            assert time.monotonic() < deadline, "the requests never reached the upstream"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)  # each call is mid-decode: ~2 s to go
        for call in calls:
            call.join(timeout=60)
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        sim.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    # Each caller is told that the gateway is going away, in the shape its client parses.
    assert all(call.status == 503 for call in calls)
    if path == MESSAGES:  # Anthropic's: what the anthropic SDK and Claude Code read
        assert all(call.body["type"] == "error" for call in calls)
        assert all(call.error["type"] == "api_error" for call in calls)
        assert all("shutting down" in str(call.error["message"]) for call in calls)
    else:
        assert all(call.error["code"] == "shutting_down" for call in calls)
    rows = _ledger_rows(tmp_path / "data" / "farebox.db")
    # Every call the upstream worked on is in the ledger, booked as cut by the gateway.
    assert len(rows) == STREAMS
    assert all(status == 499 for status, _ in rows.values())
