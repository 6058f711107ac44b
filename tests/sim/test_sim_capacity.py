"""The simulator as a busy GPU server: queueing, cache timing, KV eviction, key order, tools.

Timing is asserted on ordering and generous ratios only, with small millisecond rates:
a loaded CI box stretches every duration, never reorders these.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import orjson

from gateway.config import load_config
from gateway.settings import DEFAULT_CONFIG
from gateway.sim import SimConfig, SimServer, create_sim_app
from gateway.sim.capacity import Seats
from gateway.sim.config import profile_config
from gateway.sim.timing import plan_timing

URL = "/v1/chat/completions"
LONG = "Fare boxes count coins, read cards and print transfers for every rider. " * 30


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-chat", "messages": [{"role": "user", "content": content}], **extra}


async def _ttft(client: httpx.AsyncClient, content: str) -> float:
    """Seconds until the first chunk of a streamed answer arrives (read to its end: a
    client that leaves gives its seat back at once)."""
    started = time.perf_counter()
    first = None
    async with client.stream("POST", URL, json=_chat(content, stream=True)) as response:
        async for _ in response.aiter_bytes():
            first = first or time.perf_counter() - started
    assert first is not None
    return first


async def _ttfts(base_url: str, contents: list[str]) -> list[float]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        return await asyncio.gather(*(_ttft(client, content) for content in contents))


def test_time_to_first_token_rises_with_load_on_a_small_server() -> None:
    config = SimConfig(decode_ms_per_token=4.0, max_num_seqs=2)  # 24 tokens: ~0.1 s a reply
    with SimServer(config) as sim:
        (alone,) = asyncio.run(_ttfts(sim.base_url, ["alone"]))
        loaded = asyncio.run(_ttfts(sim.base_url, [f"busy {n}" for n in range(8)]))
        queued = [r.queued_ms for r in sim.state.log.records()[1:]]
    # Two run at once: the others wait in line for whole answers (~0.1 s each wave), so
    # the last wave's first token comes after three answers' decode (a sleep never ends
    # early: these are lower bounds, safe on a loaded box).
    assert sum(1 for waited in queued if waited > 20) >= 4
    assert max(loaded) > 0.25 and max(loaded) > alone


async def test_a_cache_hit_is_faster_than_a_miss_with_timing_on() -> None:
    app = create_sim_app(SimConfig(prefill_ms_per_token=0.5))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        walls, planned = [], []
        for _ in range(2):
            started = time.perf_counter()
            response = await client.post(URL, json=_chat(LONG))
            walls.append(time.perf_counter() - started)
            planned.append(float(response.headers["x-sim-prefill-ms"]))
    miss, hit = walls
    assert planned[0] > 200 and planned[1] < planned[0] / 10  # ~450 tokens, then ~1 block
    assert miss > 0.2 and hit < miss


async def test_kv_pressure_evicts_a_cached_prefix() -> None:
    # 64 blocks of 16 tokens: two ~450-token prompts (with their answers) fill it.
    app = create_sim_app(SimConfig(kv_cache_tokens=1024))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:

        async def cached(content: str) -> int:
            response = await client.post(URL, json=_chat(content))
            return int(response.headers["x-sim-cached-tokens"])

        assert await cached(LONG) == 0
        assert await cached(LONG) > 400  # a hit while the cache has room
        for other in ("Other riders. ", "More riders. ", "Night buses. "):
            await cached(other * 120)
        assert await cached(LONG) == 0  # evicted by the newer prompts: a miss again


async def test_a_reordered_tool_schema_is_a_cache_miss(client: httpx.AsyncClient) -> None:
    params = {"type": "object", "properties": {"stop": {"type": "string"}}, "required": ["stop"]}
    tool = {
        "type": "function",
        "function": {"name": "fare", "description": LONG, "parameters": params},
    }
    reordered = {"function": {"parameters": params, "description": LONG, "name": "fare"}}
    reordered["type"] = "function"

    async def cached(tools: list[dict[str, Any]]) -> int:
        response = await client.post(URL, json=_chat("Fare to the depot?", tools=tools))
        return int(response.headers["x-sim-cached-tokens"])

    assert await cached([tool]) == 0
    assert await cached([tool]) > 400  # the same bytes: a hit
    assert await cached([reordered]) == 0  # the same schema, keys reordered: a miss


async def test_seats_wait_in_line_and_give_way_when_a_client_leaves() -> None:
    seats = Seats(max_seqs=1, kv_blocks=None, block_size=16)
    await seats.acquire(1)
    waiting = asyncio.ensure_future(seats.acquire(1))
    leaving = asyncio.ensure_future(seats.acquire(1))
    await asyncio.sleep(0)
    assert seats.waiting == 2
    leaving.cancel()
    await asyncio.sleep(0)
    seats.release(1)
    await asyncio.wait_for(waiting, 1)
    assert seats.running == 1 and seats.waiting == 0


def test_tools_are_called_by_plan_and_seed_through_the_sdk() -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "lookup_fare",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "zone": {"type": "string", "enum": ["A", "B"]},
                        "riders": {"type": "integer"},
                    },
                    "required": ["zone", "riders"],
                },
            },
        }
    ]
    with SimServer(SimConfig(tool_rounds=1, seed=7)) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        messages: Any = [{"role": "user", "content": "What does a ride cost?"}]
        first = client.chat.completions.create(model="sim-thinker", messages=messages, tools=tools)
        again = client.chat.completions.create(model="sim-thinker", messages=messages, tools=tools)
        with client.chat.completions.stream(
            model="sim-chat", messages=messages, tools=tools
        ) as stream:
            streamed = stream.get_final_completion()
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        call = choice.message.tool_calls[0]
        arguments = orjson.loads(call.function.arguments)
        assert call.function.name == "lookup_fare" and arguments["zone"] in ("A", "B")
        assert again.choices[0].message.tool_calls == choice.message.tool_calls  # the seed's
        assert first.usage is not None and first.usage.completion_tokens_details is not None
        assert first.usage.completion_tokens_details.reasoning_tokens > 0  # thinks, then calls
        streamed_call = streamed.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert orjson.loads(streamed_call.function.arguments).keys() == {"zone", "riders"}
        result = {"role": "tool", "tool_call_id": call.id, "content": "2.50"}
        answer = client.chat.completions.create(
            model="sim-chat",
            messages=[*messages, choice.message.model_dump(exclude_none=True), result],
            tools=tools,
        )
        assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.content
        none = client.chat.completions.create(
            model="sim-chat", messages=messages, tools=tools, tool_choice="none"
        )
        assert none.choices[0].message.tool_calls is None
        client.close()


def test_the_realistic_profile_times_hits_tiers_and_capacity() -> None:
    config = profile_config("realistic")
    assert config.max_num_seqs and config.kv_cache_tokens
    model = config.models[0]
    prefill, decode = config.rates(model, "default")
    flex, priority = config.rates(model, "flex"), config.rates(model, "priority")
    assert prefill > 0 and decode > 0 and flex[1] > decode > priority[1]
    # docs/simulator.md's numbers: 2,000 uncached tokens, 16 after a hit, 24 answer tokens.
    assert plan_timing(config, model, "default", 2000, 24).prefill_ms == 100
    assert plan_timing(config, model, "default", 16, 24).prefill_ms < 1
    assert plan_timing(config, model, "default", 16, 24).decode_ms == 960
    assert profile_config(None) == SimConfig()  # tests and benches stay instant


def test_make_runs_default_configuration_reaches_the_simulators_tiers() -> None:
    # The embedded default sends sim-chat's flex and priority to the simulator as
    # service_tier, which times them at tier_timing (and prices them by multiplier).
    config = load_config(DEFAULT_CONFIG)
    tiers = config.routing["sim-chat"].tiers
    assert tiers["flex"].set == {"service_tier": "flex"}
    assert tiers["priority"].set == {"service_tier": "priority"}
    realistic = profile_config("realistic")
    model = realistic.models[0]
    decode = {tier: realistic.rates(model, tier)[1] for tier in ("default", "flex", "priority")}
    assert decode["flex"] == 2 * decode["default"] == 4 * decode["priority"]
