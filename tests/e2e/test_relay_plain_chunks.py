"""A long stream through the real simulator: the relay's short path changes no byte and no count.

The reference is the simulator itself (the same upstream body sent to it directly: the
client must get its events byte for byte, but for the completion id, the creation time,
and `usage.cost` the gateway adds to the usage chunk) and the full walk of every chunk
(`chunk_object` and `Meter.observe_chunk`) over those events for the ledger's counts.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.pipeline.measure import Meter
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig, SimModel
from gateway.upstream.replies import chunk_object
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.servers import ServerThread, running

WORDS = " ".join(f"w{i}" for i in range(50))
LONG = [
    SimModel(name="sim-long", output_tokens=600),
    SimModel(name="sim-long-thinker", thinking=True, reasoning_tokens=200, output_tokens=400),
]
CONFIG = """models:
  long: {{provider: openai, model: sim-long, base_url: "{url}/v1", family: vllm}}
  long-thinker: {{provider: openai, model: sim-long-thinker, base_url: "{url}/v1", family: vllm}}
prices:
  long: {{input: 1.0, output: 2.0}}
  long-thinker: {{input: 1.0, output: 2.0}}
"""
ID = re.compile(rb'"id":"[^"]*","object":"chat\.completion\.chunk","created":\d+')


@pytest.fixture(scope="module")
def long_sim() -> Iterator[ServerThread]:
    """A simulator of its own whose models answer with hundreds of tokens."""
    with running(create_sim_app(SimConfig(models=LONG))) as server:
        yield server


@pytest.fixture
def long_gateway(long_sim: ServerThread, make_gateway: GatewayFactory, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=long_sim.url))
    return make_gateway(config=config)


@pytest.fixture
def long_control(long_sim: ServerThread) -> Iterator[SimControl]:
    control = SimControl(long_sim.url)
    control.reset()
    yield control
    control.close()


def _events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event.strip()]


def _upstream_body(sim: SimControl) -> bytes:
    [request] = [r for r in sim.requests() if str(r["path"]).endswith("/chat/completions")]
    return base64.b64decode(str(request["body_b64"]))


def _without_ids(events: list[bytes]) -> list[bytes]:
    return [ID.sub(b'"id":"-","object":"chat.completion.chunk","created":0', e) for e in events]


def _reference_meter(events: list[bytes]) -> Meter:
    meter = Meter()
    for event in events:
        chunk = chunk_object(event, "reference")
        if chunk is not None:
            meter.observe_chunk(chunk)
    return meter


@pytest.mark.parametrize(
    ("alias", "model"), [("long", "sim-long"), ("long-thinker", "sim-long-thinker")]
)
def test_a_long_stream_is_relayed_and_booked_as_the_full_walk_would(
    long_gateway: Gateway, long_control: SimControl, alias: str, model: str
) -> None:
    gateway, sim = long_gateway, long_control
    body: dict[str, Any] = {
        "model": alias,
        "messages": [{"role": "user", "content": f"Repeat: {WORDS}"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 500,
    }
    if alias == "long-thinker":
        body["include_reasoning"] = True
    task = f"plain-{alias}"
    response = httpx.post(
        f"{gateway.base_url}/chat/completions",
        json=body,
        headers={"X-Task-Id": task},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    got = _events(response.content)
    assert len(got) > 400  # many chunks, nearly all of them plain content

    # The simulator's own bytes for the body the gateway sent it (its cache emptied first,
    # or the repeat would be a cache hit).
    upstream_body = _upstream_body(sim)
    sim.reset()
    direct = httpx.post(
        f"{sim.url}/v1/chat/completions",
        content=upstream_body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    sent = _events(direct.content)
    assert len(got) == len(sent)
    *got_head, got_usage, got_done = _without_ids(got)
    *sent_head, sent_usage, sent_done = _without_ids(sent)
    assert got_head == sent_head and got_done == sent_done == b"data: [DONE]\n\n"
    usage = orjson.loads(got_usage.removeprefix(b"data: "))["usage"]
    assert "cost" in usage and usage | {"cost": None} != usage
    del usage["cost"]
    assert usage == orjson.loads(sent_usage.removeprefix(b"data: "))["usage"]

    # What the ledger booked is what the full walk of those events reads.
    reference = _reference_meter(sent)
    assert reference.usage is not None and reference.finish_reason == "length"
    assert reference.chunks == len(sent) - 1  # every event but [DONE]
    ctx = gateway.last(1)
    assert ctx.usage == reference.usage
    assert ctx.timings.first_token is not None and ctx.timings.last_token is not None
    row = httpx.get(f"{gateway.base_url}/tasks/{task}").json()["requests"][0]
    assert row["model_alias"] == alias and row["upstream_model"] == model
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        reference.usage.prompt_tokens,
        reference.usage.completion_tokens,
    )
    assert (row["reasoning_tokens"], row["estimated"]) == (
        reference.usage.reasoning_tokens,
        False,
    )
    assert row["streamed"] in (1, True) and row["status_code"] == 200
    assert row["ttft_ms"] is not None and row["decode_tps"] is not None
    assert (row["ttfat_ms"] is not None) == (reference.first_answer_token is not None)
