"""A Responses request is prefix-checked while the upstream works, where that changes
nothing sent: forwarded as the client wrote it (`wire: responses`) or translated to chat,
on a route that only observes. The reply's headers, whole or streamed, are what they were
when the check ran before the call; a strict route still refuses before sending.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.pipeline import prefix, prefix_pending, wire_prefix
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.upstream_seen import upstream_had_it

GUIDE = "You are the billing agent. Follow the runbook exactly. " * 200
CONFIG = """
models:
  native: {{model: sim-chat, base_url: "{sim}/v1", family: vllm, wire: responses}}
  translated: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  strict: {{model: sim-chat, base_url: "{sim}/v1", family: vllm, prefix: [strict]}}
prices:
  native: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  translated: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  strict: {{input: 1.00, cached_input: 0.10, output: 4.00}}
"""


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


def _watch(monkeypatch: pytest.MonkeyPatch, sim: SimControl, before: int) -> list[bool]:
    """Each check run (forwarded or translated): whether the upstream had the request."""
    runs: list[bool] = []

    def watched(real: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            runs.append(upstream_had_it(sim, before))
            return real(*args, **kwargs)

        return check

    monkeypatch.setattr(wire_prefix, "observe_wire", watched(wire_prefix.observe_wire))
    monkeypatch.setattr(prefix, "_check", watched(prefix._check))
    monkeypatch.setattr(prefix_pending, "_check", watched(prefix_pending._check))
    return runs


@pytest.mark.parametrize("model", ["native", "translated"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_observing_route_checks_once_the_upstream_has_the_request(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch, model: str, stream: bool
) -> None:
    client = gateway.sdk()
    args: Any = {"model": model, "instructions": GUIDE, "input": "Check invoice 7."}
    client.responses.create(**args)
    before = len(sim.requests())
    sim.fault(delay_s=1.5)  # the simulator holds its reply past the check's wait
    runs = _watch(monkeypatch, sim, before)
    raw = client.responses.with_raw_response.create(**args, stream=stream)
    if stream:
        assert [event.type for event in raw.parse()][-1] == "response.completed"
    assert runs == [True]  # once, with the request already at the upstream
    assert raw.headers["x-farebox-prefix"] == "stable"
    assert gateway.last(2).prefix is not None


def test_a_strict_route_still_refuses_before_the_upstream_sees_anything(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = len(sim.requests())
    runs = _watch(monkeypatch, sim, before)
    volatile = f"Request id 5f0c6a1e-8b9d-4c3e-a2f1-0d9e8c7b6a54. {GUIDE}"
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.sdk().responses.create(model="strict", instructions=volatile, input="hi")
    assert refused.value.response.json()["error"]["code"] == "volatile_prefix"
    assert runs == [False]
    assert len(sim.requests()) == before
