"""A gateway on a real port, forwarding to the simulator on another real port."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig, ModelRoute
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings, Timeouts
from tests.conftest import SimControl
from tests.servers import ServerThread

ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"


def sim_routes(sim_url: str) -> dict[str, ModelRoute]:
    """The test configuration: each wire format the gateway speaks, all on the simulator."""
    return {
        # An alias that is the upstream's own name: nothing in the body has to change.
        "sim-chat": ModelRoute(provider="openai", model="sim-chat", base_url=f"{sim_url}/v1"),
        "chat": ModelRoute(
            provider="openai", model="sim-chat", base_url=f"{sim_url}/v1", family="vllm"
        ),
        "thinker": ModelRoute(
            provider="openai", model="sim-thinker", base_url=f"{sim_url}/v1", family="vllm"
        ),
        "sglang-thinker": ModelRoute(
            provider="openai", model="sim-sglang-thinker", base_url=f"{sim_url}/v1", family="sglang"
        ),
        "embed": ModelRoute(provider="openai", model="sim-embed", base_url=f"{sim_url}/v1"),
        "claude": ModelRoute(
            provider="anthropic",
            model="claude-sim",
            base_url=sim_url,
            api_key_env="FAREBOX_TEST_ANTHROPIC_KEY",
        ),
        # Prefix-stability actions, one route each.
        "strict-chat": ModelRoute(model="sim-chat", base_url=f"{sim_url}/v1", prefix=["strict"]),
        "tidy-chat": ModelRoute(
            model="sim-chat",
            base_url=f"{sim_url}/v1",
            family="openai",
            prefix=["normalize", "sticky_cache_key"],
        ),
        "claude-cached": ModelRoute(
            provider="anthropic",
            model="claude-sim",
            base_url=sim_url,
            api_key_env="FAREBOX_TEST_ANTHROPIC_KEY",
            prefix=["anthropic_cache_control"],
        ),
    }


@dataclass
class Gateway:
    """A running gateway and the request contexts its pipeline finished."""

    server: ServerThread
    seen: list[RequestContext] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
    clients: list[openai.OpenAI] = field(default_factory=list)

    def sdk(self, api_key: str = "sk-client-key", **options: Any) -> openai.OpenAI:
        """An official SDK client for this gateway, closed when the gateway stops."""
        client = openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **options)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.server.stop()

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def last(self, count: int = 1, timeout: float = 10.0) -> RequestContext:
        """The latest finished request, once at least `count` have finished.

        A stream is recorded when the relay closes, just after the client read `[DONE]`.
        """
        deadline = time.monotonic() + timeout
        while len(self.seen) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(self.seen)} of {count} requests finished")
            time.sleep(0.01)
        return self.seen[-1]


GatewayFactory = Callable[..., Gateway]


PRICES = {
    # A self-hosted model: GPU time, $3.60/h at 10,000 prefill and 1,000 decode tokens/s.
    "chat": {
        "gpu": {
            "cost_per_hour": "3.60",
            "prefill_tokens_per_second": 10000,
            "decode_tokens_per_second": 1000,
        }
    },
    # Billed like Claude Sonnet 4.5 from litellm's map: $3 in, $0.30 cached, $15 out.
    "claude": {"base": "claude-sonnet-4-5"},
}


def sim_config(sim_url: str) -> GatewayConfig:
    """Routes to the simulator, with prices."""
    return GatewayConfig.model_validate({"models": sim_routes(sim_url), "prices": PRICES})


def _wait_warm(server: ServerThread, settings: Settings, timeout: float = 120) -> None:
    """Wait, as a load balancer would, until litellm has loaded for the routes needing it."""
    deadline = time.monotonic() + timeout
    key = settings.admin_key  # /readyz takes a key when one is configured
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    url = f"{server.url}/readyz"
    while httpx.get(url, headers=headers, timeout=10).json()["status"] == "warming":
        assert time.monotonic() < deadline, "the gateway never finished warming up"
        time.sleep(0.05)


@pytest.fixture
def make_gateway(
    sim: SimControl, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[GatewayFactory]:
    """Start gateways with optional settings overrides; all are stopped after the test."""
    monkeypatch.setenv("FAREBOX_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    started: list[Gateway] = []

    def start(
        timeouts: Timeouts | None = None, config: Path | None = None, **settings: object
    ) -> Gateway:
        """A gateway on the test routes, or on the configuration file `config`."""
        seen: list[RequestContext] = []
        settings.setdefault("data_dir", tmp_path / f"gateway-{len(started)}")
        gateway_settings = Settings(timeouts=timeouts or Timeouts(), config=config, **settings)  # type: ignore[arg-type]
        routes = None if config is not None else sim_config(sim.url)
        app = create_app(gateway_settings, routes, observers=[seen.append])
        gateway = Gateway(ServerThread(app, gateway_settings).start(), seen, gateway_settings)
        started.append(gateway)
        _wait_warm(gateway.server, gateway_settings)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def gateway(make_gateway: GatewayFactory) -> Gateway:
    return make_gateway()
