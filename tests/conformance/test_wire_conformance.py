"""Every reply and stream chunk the gateway sends validates against OpenAI's schemas.

One route per backend family (OpenAI-compatible, vLLM, SGLang, Anthropic through
litellm), whole and streamed, with and without the usage chunk, thinking on and off;
each reply is read off the wire, as the client got it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conformance.wire import ROUTES, Exchange, nonconforming, post_chat, write_config
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

MESSAGES = [{"role": "user", "content": "Say hello to the gateway."}]
THINKING = {
    "claude": {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
    "vllm-thinker": {"max_tokens": 256},
    "sglang-thinker": {"max_tokens": 256},
}


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    return make_gateway(config=write_config(tmp_path, sim.url))


def _conforming(exchange: Exchange) -> None:
    assert exchange.status == 200, exchange.objects
    problems = nonconforming(exchange)
    assert problems == [], "\n".join(p[:400] for p in problems)


@pytest.mark.parametrize("model", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_replies_conform(gateway: Gateway, model: str, stream: bool) -> None:
    exchange = post_chat(gateway.base_url, {"model": model, "messages": MESSAGES, "stream": stream})
    _conforming(exchange)
    if stream:  # every chunk but the last says `finish_reason: null`, not nothing
        reasons = [c["choices"][0]["finish_reason"] for c in exchange.objects if c["choices"]]
        assert reasons[-1] in ("stop", "length") and set(reasons[:-1]) == {None}


@pytest.mark.parametrize("model", ROUTES)
def test_streams_with_the_usage_chunk_conform(gateway: Gateway, model: str) -> None:
    body: dict[str, Any] = {
        "model": model,
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    exchange = post_chat(gateway.base_url, body)
    _conforming(exchange)
    assert exchange.objects[-1]["choices"] == [] and exchange.objects[-1]["usage"]


@pytest.mark.parametrize("model", sorted(THINKING))
@pytest.mark.parametrize("stream", [False, True])
def test_thinking_replies_conform(gateway: Gateway, model: str, stream: bool) -> None:
    body = {"model": model, "messages": MESSAGES, "stream": stream, **THINKING[model]}
    _conforming(post_chat(gateway.base_url, body))
