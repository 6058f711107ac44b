"""Every reply, stream chunk and error the gateway sends validates against OpenAI's schemas."""

from __future__ import annotations

import pytest

from tests.conformance.wire import ROUTES, nonconforming, post_chat, write_config
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

MESSAGES = [{"role": "user", "content": "Say hello to the gateway."}]


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path) -> Gateway:
    return make_gateway(config=write_config(tmp_path, sim.url))


@pytest.mark.parametrize("model", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
def test_replies_conform(gateway: Gateway, model: str, stream: bool) -> None:
    body = {"model": model, "messages": MESSAGES, "stream": stream}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200, exchange.objects
    problems = nonconforming(exchange)
    assert problems == [], "\n".join(p[:400] for p in problems)
