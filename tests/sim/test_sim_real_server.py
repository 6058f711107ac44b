"""The simulator on a real port: the official OpenAI SDK, disconnects and dropped streams."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.sim import SimConfig, SimServer

CHAT = "/v1/chat/completions"


def chat(model: str = "sim-chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def wait_for(server: SimServer, predicate: Any, timeout: float = 3.0) -> dict[str, Any]:
    """Poll the request log until the newest entry satisfies predicate."""
    deadline = time.monotonic() + timeout
    while True:
        entries = httpx.get(f"{server.base_url}/sim/requests").json()
        if entries and predicate(entries[-1]):
            return dict(entries[-1])
        assert time.monotonic() < deadline, entries
        time.sleep(0.02)


@pytest.fixture
def slow_server() -> Iterator[SimServer]:
    """A simulator that takes 20 ms per output token."""
    with SimServer(SimConfig(decode_ms_per_token=20.0)) as server:
        yield server


def test_openai_sdk_non_streaming(live_sim: SimServer) -> None:
    client = openai.OpenAI(base_url=live_sim.openai_base_url, api_key="x", max_retries=0)
    completion = client.chat.completions.create(
        model="sim-thinker", messages=[{"role": "user", "content": "hi"}], seed=3
    )
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == 64
    details = completion.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == 40
    extra = completion.choices[0].message.model_extra or {}
    assert len(extra["reasoning"].split(" ")) == 40
    assert completion.service_tier == "default"


def test_openai_sdk_streaming(live_sim: SimServer) -> None:
    client = openai.OpenAI(base_url=live_sim.openai_base_url, api_key="x", max_retries=0)
    stream = client.chat.completions.create(
        model="sim-chat",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
        service_tier="priority",
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split(" ")) == 24
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 24
    assert {c.service_tier for c in chunks} == {"priority"}
    first = client.chat.completions.create(
        model="sim-chat", messages=[{"role": "user", "content": "hi"}]
    )
    assert first.choices[0].message.content == text


def test_streaming_disconnect_marks_cancelled(slow_server: SimServer) -> None:
    with (
        httpx.Client(base_url=slow_server.base_url) as client,
        client.stream("POST", CHAT, json=chat(stream=True)) as response,
    ):
        assert float(response.headers["x-sim-decode-ms"]) == pytest.approx(24 * 20.0)
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
    entry = wait_for(slow_server, lambda e: e["cancelled"])
    assert entry["completed"] is False and entry["stream"] is True


def test_non_streaming_disconnect_marks_cancelled(slow_server: SimServer) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{slow_server.base_url}{CHAT}", json=chat(), timeout=0.1)
    entry = wait_for(slow_server, lambda e: e["cancelled"])
    assert entry["status"] == 499


def test_finished_stream_is_not_cancelled(live_sim: SimServer) -> None:
    response = httpx.post(f"{live_sim.base_url}{CHAT}", json=chat(stream=True))
    assert response.text.endswith("data: [DONE]\n\n")
    entry = wait_for(live_sim, lambda e: e["completed"])
    assert entry["cancelled"] is False


def test_drop_after_chunks(live_sim: SimServer) -> None:
    fault = {"drop_after_chunks": 3, "match": {"model": "sim-chat"}}
    assert httpx.post(f"{live_sim.base_url}/sim/faults", json=fault).status_code == 201
    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", f"{live_sim.base_url}{CHAT}", json=chat(stream=True)) as response,
    ):
        for line in response.iter_lines():
            if line:
                received.append(line)
    assert len(received) == 3 and "[DONE]" not in received[-1]
    entry = wait_for(live_sim, lambda e: e["dropped"])
    assert entry["completed"] is False


def test_delay_fault_lets_client_time_out(live_sim: SimServer) -> None:
    fault = {"delay_s": 5, "status": 503}
    assert httpx.post(f"{live_sim.base_url}/sim/faults", json=fault).status_code == 201
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{live_sim.base_url}{CHAT}", json=chat(), timeout=0.2)
    entry = wait_for(live_sim, lambda e: e["cancelled"])
    assert entry["fault"] is True
