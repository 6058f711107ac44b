"""Tier and speed fields: refused where the real APIs refuse them, echoed as they echo."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.sim import SimConfig, SimModel, create_sim_app

ANTHROPIC = {"anthropic-version": "2023-06-01"}
FAST_BETA = {**ANTHROPIC, "anthropic-beta": "context-1m-2025-08-07, fast-mode-2026-02-01"}
MESSAGE = {"max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}
CHAT = {"model": "sim-chat", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
async def sim() -> AsyncIterator[httpx.AsyncClient]:
    models = [
        SimModel(name="opus-fast", api="anthropic", supports_fast_mode=True),
        SimModel(name="sonnet", api="anthropic"),
        SimModel(name="sim-chat"),
    ]
    config = SimConfig(decode_ms_per_token=1.0, models=models)
    transport = httpx.ASGITransport(app=create_sim_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client


async def test_speed_needs_the_fast_mode_beta(sim: httpx.AsyncClient) -> None:
    body = {**MESSAGE, "model": "opus-fast", "speed": "fast"}
    refused = await sim.post("/v1/messages", json=body, headers=ANTHROPIC)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "type": "invalid_request_error",
        "message": "speed: Extra inputs are not permitted",
    }
    served = await sim.post("/v1/messages", json=body, headers=FAST_BETA)
    assert served.status_code == 200 and served.json()["usage"]["speed"] == "fast"


async def test_fast_mode_is_refused_on_a_model_without_it(sim: httpx.AsyncClient) -> None:
    body = {**MESSAGE, "model": "sonnet", "speed": "fast"}
    refused = await sim.post("/v1/messages", json=body, headers=FAST_BETA)
    assert refused.status_code == 400
    assert "fast mode is not supported" in refused.json()["error"]["message"]
    standard = {**body, "speed": "standard"}
    served = await sim.post("/v1/messages", json=standard, headers=FAST_BETA)
    assert served.status_code == 200 and served.json()["usage"]["speed"] == "standard"


async def test_the_request_log_says_the_speed_served(sim: httpx.AsyncClient) -> None:
    body = {**MESSAGE, "model": "opus-fast"}
    await sim.post("/v1/messages", json=body, headers=ANTHROPIC)
    await sim.post("/v1/messages", json={**body, "speed": "fast"}, headers=FAST_BETA)
    standard, fast = (await sim.get("/sim/requests")).json()[-2:]
    assert (standard["speed"], fast["speed"]) == ("standard", "fast")
    assert fast["planned_decode_ms"] < standard["planned_decode_ms"]


@pytest.mark.parametrize(
    ("asked", "echoed"),
    [(None, "default"), ("auto", "default"), ("flex", "flex"), ("scale", "scale"),
     ("priority", "priority"), ("fast", "priority")],
)  # fmt: skip
async def test_openai_echoes_the_tier_it_served(
    sim: httpx.AsyncClient, asked: str | None, echoed: str
) -> None:
    body = CHAT if asked is None else {**CHAT, "service_tier": asked}
    reply = await sim.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200 and reply.json()["service_tier"] == echoed


@pytest.mark.parametrize("asked", ["turbo", "batch", "standard", 3])
async def test_openai_refuses_an_unknown_service_tier(
    sim: httpx.AsyncClient, asked: object
) -> None:
    reply = await sim.post("/v1/chat/completions", json={**CHAT, "service_tier": asked})
    assert reply.status_code == 400
    assert "service_tier" in reply.text
