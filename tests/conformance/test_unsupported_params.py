"""A field the backend cannot honour is refused (naming it) or dropped and said so, never silently.

Before, litellm's `drop_params` turned `n: 2` on an Anthropic route into one choice with
status 200 and `logprobs: true` into a reply without logprobs.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conformance.wire import nonconforming, post_chat, write_config
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

MESSAGES = [{"role": "user", "content": "hi"}]
DROPPED = "x-farebox-dropped-params"


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    return make_gateway(config=write_config(tmp_path, sim.url))


def _task_rows(gateway: Gateway, task: str) -> list[dict[str, Any]]:
    """The ledger rows of `task`, once the writer has them."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30)
        if response.status_code == 200:
            return list(response.json()["requests"])
        time.sleep(0.05)
    raise AssertionError(f"task {task} never reached the ledger")


def _received(sim: SimControl) -> list[dict[str, object]]:
    """The bodies the simulator's Anthropic endpoint received, as it received them."""
    return [
        json.loads(base64.b64decode(str(record["body_b64"])))
        for record in sim.requests()
        if str(record["path"]).endswith("/messages")
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [("n", 2), ("logprobs", True), ("top_logprobs", 3), ("modalities", ["text", "audio"])],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_field_that_would_change_the_reply_is_refused(
    gateway: Gateway, sim: SimControl, field: str, value: object, stream: bool
) -> None:
    body = {"model": "claude", "messages": MESSAGES, field: value, "stream": stream}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 400, exchange.objects
    assert nonconforming(exchange) == []
    error = exchange.objects[0]["error"]
    assert (error["param"], error["code"]) == (field, "unsupported_parameter")
    assert "anthropic model claude-sim" in error["message"]
    assert _received(sim) == []  # nothing was sent, nothing billed


def test_the_sdk_sees_the_parameter_named(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.sdk().chat.completions.create(model="claude", messages=MESSAGES, n=2)  # type: ignore[arg-type]
    assert caught.value.param == "n" and caught.value.code == "unsupported_parameter"
    assert caught.value.request_id == caught.value.response.headers["x-request-id"]


def test_a_default_value_asks_for_nothing_and_passes(gateway: Gateway, sim: SimControl) -> None:
    body = {"model": "claude", "messages": MESSAGES, "n": 1, "logprobs": False}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200, exchange.objects
    assert DROPPED not in exchange.headers
    assert len(_received(sim)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_hint_is_dropped_and_the_response_says_so(
    gateway: Gateway, sim: SimControl, stream: bool
) -> None:
    body = {
        "model": "claude",
        "messages": MESSAGES,
        "seed": 7,
        "presence_penalty": 0.5,
        "stream": stream,
    }
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200, exchange.objects
    assert exchange.headers[DROPPED] == "seed,presence_penalty"
    assert nonconforming(exchange) == []
    (received,) = _received(sim)
    assert "seed" not in received and "presence_penalty" not in received
    # The ledger says so too: an untasked request's task is named after its request id.
    task = "task-" + exchange.headers["x-request-id"].removeprefix("req-")
    (row,) = _task_rows(gateway, task)
    assert row["dropped_params"] == "seed,presence_penalty"


def test_an_openai_compatible_backend_gets_the_field_and_answers_itself(
    gateway: Gateway, sim: SimControl
) -> None:
    # The simulator, like a vLLM deployment that refuses it, answers n=2 with its own 400.
    exchange = post_chat(gateway.base_url, {"model": "vllm-chat", "messages": MESSAGES, "n": 2})
    assert exchange.status == 400
    assert exchange.objects[0]["error"]["param"] == "n"
    assert nonconforming(exchange) == []
    assert DROPPED not in exchange.headers


@pytest.mark.parametrize("tier", ["auto", "default"])
def test_a_requested_tier_is_echoed_like_openai_does(gateway: Gateway, tier: str) -> None:
    body = {"model": "claude", "messages": MESSAGES, "service_tier": tier}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200, exchange.objects
    assert exchange.objects[0]["service_tier"] == "default"  # Anthropic said "standard"
    assert exchange.headers["x-farebox-tier"] == "standard"
    assert nonconforming(exchange) == []
    plain = post_chat(gateway.base_url, {"model": "claude", "messages": MESSAGES})
    assert "service_tier" not in plain.objects[0]


def test_a_stream_names_the_tier_in_every_chunk_like_openai_does(gateway: Gateway) -> None:
    body = {"model": "claude", "messages": MESSAGES, "service_tier": "auto", "stream": True}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200, exchange.objects
    chunks = exchange.objects[:-1] if exchange.objects[-1] == "[DONE]" else exchange.objects
    assert chunks and {chunk.get("service_tier") for chunk in chunks} == {"default"}
    assert nonconforming(exchange) == []
    for unset in ({"service_tier": None}, {}):  # null is not set, as at OpenAI
        plain = post_chat(
            gateway.base_url, {"model": "claude", "messages": MESSAGES, "stream": True} | unset
        )
        assert not [chunk for chunk in plain.objects if "service_tier" in chunk]
