"""Upstream failures reach the client in OpenAI's shape, with the right status."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from gateway.settings import Timeouts
from tests.conftest import SimControl
from tests.e2e.conftest import ANTHROPIC_KEY, Gateway, GatewayFactory

BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


def _post(gateway: Gateway, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30)


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_429_is_relayed_with_status_and_upstream_name(
    gateway: Gateway, sim: SimControl, stream: bool
) -> None:
    sim.fault(match={"model": "sim-chat"}, status=429, count=1, headers={"retry-after": "2"})
    response = _post(gateway, {**BODY, "stream": stream})
    error = _error(response, 429)
    assert "chat (127.0.0.1" in str(error["message"])
    assert error["type"] == "rate_limit_error"
    assert response.headers.get("retry-after") == "2"


def test_vllm_error_body_with_integer_code_becomes_openai_shape(gateway: Gateway) -> None:
    # The simulator, like vLLM, rejects an unsupported continuation with code 400 (an int).
    body = {
        "model": "chat",
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    error = _error(_post(gateway, body), 400)
    assert isinstance(error["code"], str) or error["code"] is None


def test_upstream_500_is_relayed(gateway: Gateway, sim: SimControl) -> None:
    sim.fault(match={"model": "sim-chat"}, status=500, count=1)
    error = _error(_post(gateway, BODY), 500)
    assert "returned 500" in str(error["message"])


def test_upstream_timeout_is_504(make_gateway: GatewayFactory, sim: SimControl) -> None:
    gateway = make_gateway(timeouts=Timeouts(connect=2, first_token=0.5, idle_stream=0.5))
    sim.fault(match={"model": "sim-chat"}, status=200, count=2, delay_s=3)
    error = _error(_post(gateway, BODY), 504)
    assert error["code"] == "upstream_timeout"
    error = _error(_post(gateway, {**BODY, "stream": True}), 504)
    assert "sent nothing" in str(error["message"]) or "timed out" in str(error["message"])


def test_failure_after_the_stream_started_ends_it_with_an_error_event(
    gateway: Gateway, sim: SimControl
) -> None:
    sim.fault(match={"model": "sim-chat"}, status=200, count=1, drop_after_chunks=3)
    response = _post(gateway, {**BODY, "stream": True})
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert '"error"' in events[-2]
    ctx = gateway.last()
    assert ctx.status_code == 502
    # The upstream never reported usage: what was seen is counted and marked estimated.
    assert ctx.usage is not None and ctx.usage.estimated
    assert ctx.usage.prompt_tokens > 0 and ctx.usage.completion_tokens > 0
    assert ctx.cost is not None and ctx.cost.total > 0


def test_litellm_route_errors_never_leak_the_provider_key(
    gateway: Gateway, sim: SimControl
) -> None:
    sim.fault(match={"path": "/v1/messages"}, status=401, count=2)
    client = gateway.sdk(api_key="client")
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="claude", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 401
    assert ANTHROPIC_KEY not in caught.value.response.text
    assert "claude" in caught.value.response.text


def test_client_disconnect_cancels_the_upstream_request(
    make_gateway: GatewayFactory, sim: SimControl
) -> None:
    gateway = make_gateway()
    body = {**BODY, "stream": True, "max_tokens": 2000}
    sim.http.post("/sim/config", json={"decode_ms_per_token": 20})  # slow enough to cut
    with httpx.stream(
        "POST", f"{gateway.base_url}/chat/completions", json=body, timeout=30
    ) as response:
        for _ in response.iter_bytes():
            break  # read the first bytes, then hang up
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        logged = [r for r in sim.requests() if r.get("cancelled")]
        if logged and gateway.seen:
            break
        time.sleep(0.05)
    assert logged, "the upstream request was not cancelled"
    ctx = gateway.last()
    assert ctx.status_code == 499
    assert ctx.usage is not None and ctx.usage.estimated and ctx.usage.prompt_tokens > 0
