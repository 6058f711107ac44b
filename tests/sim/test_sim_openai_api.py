"""The vLLM-compatible chat completion route, in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from gateway.sim import SimConfig, SimModel, create_sim_app

ChunkParser = Callable[[str], list[dict[str, Any]]]

URL = "/v1/chat/completions"
LONG_SYSTEM = "You are a careful assistant who answers in short sentences. " * 20


def chat(model: str = "sim-chat", text: str = "hi", **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": text}]
    return {"model": model, "messages": messages, **extra}


async def test_non_streaming_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json=chat())
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "sim-chat"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
    assert choice["message"]["reasoning"] is None
    usage = body["usage"]
    assert usage["completion_tokens"] == 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + 24
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert "completion_tokens_details" not in usage
    assert body["service_tier"] == "default"


async def test_cached_tokens_grow_then_vanish(client: httpx.AsyncClient) -> None:
    first = (await client.post(URL, json=chat(text="one"))).json()["usage"]
    second = await client.post(URL, json=chat(text="one and a longer second question"))
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0
    assert cached >= first["prompt_tokens"] - 16
    assert second.headers["x-sim-cached-tokens"] == str(cached)
    changed = chat(text="one")
    changed["messages"][0]["content"] = "Different start. " + LONG_SYSTEM
    third = (await client.post(URL, json=changed)).json()["usage"]
    assert third["prompt_tokens_details"]["cached_tokens"] == 0


async def test_cache_salt_isolates(client: httpx.AsyncClient) -> None:
    await client.post(URL, json=chat())
    salted = (await client.post(URL, json=chat(cache_salt="tenant-b"))).json()
    assert salted["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


@pytest.mark.parametrize(
    ("model", "field"), [("sim-thinker", "reasoning"), ("sim-sglang-thinker", "reasoning_content")]
)
async def test_reasoning_counted(client: httpx.AsyncClient, model: str, field: str) -> None:
    body = (await client.post(URL, json=chat(model))).json()
    message = body["choices"][0]["message"]
    assert len(message[field].split(" ")) == 40
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 40}
    assert body["usage"]["completion_tokens"] == 64


@pytest.mark.parametrize(
    ("model", "field"), [("sim-thinker", "reasoning"), ("sim-sglang-thinker", "reasoning_content")]
)
async def test_reasoning_streamed(
    client: httpx.AsyncClient, chunks_of: ChunkParser, model: str, field: str
) -> None:
    payload = chat(model, stream=True, stream_options={"include_usage": True})
    chunks = chunks_of((await client.post(URL, json=payload)).text)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert sum(field in d for d in deltas) == 40
    assert sum(bool(d.get("content")) for d in deltas) == 24
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 40


async def test_effort_and_switches(client: httpx.AsyncClient) -> None:
    async def reasoning(**extra: Any) -> int:
        body = (await client.post(URL, json=chat("sim-thinker", **extra))).json()
        return int(body["usage"]["completion_tokens_details"]["reasoning_tokens"])

    assert await reasoning(reasoning_effort="low") == 20
    assert await reasoning(reasoning_effort="high") == 80
    assert await reasoning(reasoning_effort="none") == 0
    assert await reasoning(chat_template_kwargs={"enable_thinking": False}) == 0


async def test_thinking_budget_caps_reasoning(client: httpx.AsyncClient) -> None:
    body = (await client.post(URL, json=chat("sim-thinker", thinking_token_budget=7))).json()
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 7
    assert body["choices"][0]["finish_reason"] == "stop"
    # A backend without per-request budgets ignores the field, as vLLM ignores extras.
    ignored = await client.post(URL, json=chat("sim-sglang-thinker", thinking_token_budget=7))
    assert ignored.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] == 40


async def test_sglang_budgets_hint_and_strict(client: httpx.AsyncClient) -> None:
    async def reasoning(model: str, **fields: Any) -> int:
        body = (await client.post(URL, json=chat(model, **fields))).json()
        return int(body["usage"]["completion_tokens_details"]["reasoning_tokens"])

    # chat_template_kwargs.thinking_budget only reaches the chat template: a hint.
    hint = {"chat_template_kwargs": {"thinking_budget": 7}}
    assert await reasoning("sim-sglang-thinker", **hint) == 40
    # custom_params.thinking_budget is held by an engine running strict thinking.
    assert await reasoning("sim-thinker", custom_params={"thinking_budget": 7}) == 7
    assert await reasoning("sim-sglang-thinker", custom_params={"thinking_budget": 7}) == 40


async def test_max_tokens_means_length(client: httpx.AsyncClient, chunks_of: ChunkParser) -> None:
    body = (await client.post(URL, json=chat("sim-thinker", max_tokens=10))).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["message"]["content"] is None
    assert body["usage"]["completion_tokens"] == 10
    capped = chat("sim-chat", max_completion_tokens=3, max_tokens=50, stream=True)
    chunks = chunks_of((await client.post(URL, json=capped)).text)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert "usage" not in chunks[-1]


async def test_stop_arrives_on_an_empty_delta(
    client: httpx.AsyncClient, chunks_of: ChunkParser
) -> None:
    chunks = chunks_of((await client.post(URL, json=chat(stream=True))).text)
    assert len(chunks) == 1 + 24 + 1
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {"content": ""},
        "logprobs": None,
        "finish_reason": "stop",
        "stop_reason": None,
    }
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1


async def test_continue_after_end_of_thinking(client: httpx.AsyncClient) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<think>\nI thought enough.\n</think>\n\n"},
    ]
    payload = {
        "model": "sim-thinker",
        "messages": messages,
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    body = (await client.post(URL, json=payload)).json()
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert body["choices"][0]["message"]["reasoning"] is None
    assert body["usage"]["completion_tokens"] == 24
    messages[-1]["content"] = "<think>\nStill going"
    partial = (await client.post(URL, json=payload)).json()
    assert partial["usage"]["completion_tokens_details"]["reasoning_tokens"] == 40 - 3


async def test_continue_refusals(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]
    both = await client.post(
        URL, json={"model": "sim-thinker", "messages": messages, "continue_final_message": True}
    )
    assert both.status_code == 400 and "add_generation_prompt" in both.json()["error"]["message"]
    unsupported = await client.post(
        URL,
        json={
            "model": "sim-sglang-thinker",
            "messages": messages,
            "continue_final_message": True,
            "add_generation_prompt": False,
        },
    )
    assert unsupported.status_code == 400
    assert unsupported.json()["error"]["type"] == "BadRequestError"


async def test_seed_determinism(client: httpx.AsyncClient) -> None:
    async def text(**extra: Any) -> str:
        body = (await client.post(URL, json=chat(**extra))).json()
        return str(body["choices"][0]["message"]["content"])

    assert await text(seed=5) == await text(seed=5)
    assert await text(seed=5) != await text(seed=6)
    assert await text() == await text(seed=0)


async def test_timing_headers_follow_rates() -> None:
    config = SimConfig(
        prefill_ms_per_token=0.25,
        decode_ms_per_token=2.0,
        models=[
            SimModel(name="m", output_tokens=3),
            SimModel(name="slow", decode_ms_per_token=0.5),
        ],
    )
    transport = httpx.ASGITransport(app=create_sim_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        first = await client.post(URL, json=chat("m"))
        prompt = first.json()["usage"]["prompt_tokens"]
        assert float(first.headers["x-sim-prefill-ms"]) == pytest.approx(prompt * 0.25)
        assert float(first.headers["x-sim-decode-ms"]) == pytest.approx(3 * 2.0)
        again = await client.post(URL, json=chat("m"))
        cached = int(again.headers["x-sim-cached-tokens"])
        assert float(again.headers["x-sim-prefill-ms"]) == pytest.approx((prompt - cached) * 0.25)
        flex = await client.post(URL, json=chat("m", text="flex", service_tier="flex"))
        assert flex.json()["service_tier"] == "flex"
        assert float(flex.headers["x-sim-decode-ms"]) == pytest.approx(3 * 2.0 * 2)
        slow = await client.post(URL, json=chat("slow"))
        assert float(slow.headers["x-sim-decode-ms"]) == pytest.approx(24 * 0.5)


async def test_vllm_error_shapes(client: httpx.AsyncClient) -> None:
    malformed = await client.post(
        URL, content=b"{not json", headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 400
    assert malformed.json()["error"]["code"] == 400
    missing = await client.post(URL, json={"model": "sim-chat"})
    error = missing.json()["error"]
    assert missing.status_code == 400 and "messages" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    unknown = await client.post(URL, json=chat("nope"))
    assert unknown.status_code == 404
    assert unknown.json()["error"] == {
        "message": "The model `nope` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    options = await client.post(URL, json=chat(stream_options={"include_usage": True}))
    assert options.status_code == 400 and options.json()["error"]["param"] == "stream_options"
    anthropic_model = await client.post(URL, json=chat("claude-sim"))
    assert anthropic_model.status_code == 404


async def test_context_length() -> None:
    config = SimConfig(models=[SimModel(name="tiny", max_model_len=200)])
    transport = httpx.ASGITransport(app=create_sim_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as tiny:
        too_long = await tiny.post(URL, json=chat("tiny"))
        assert too_long.status_code == 400
        assert "maximum context length is 200" in too_long.json()["error"]["message"]
        short = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 500,
        }
        assert (await tiny.post(URL, json=short)).status_code == 400


async def test_unknown_fields_and_parts(client: httpx.AsyncClient) -> None:
    payload = {
        "model": "sim-chat",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}
        ],
        "temperature": 0.2,
        "some_future_field": {"x": 1},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    assert (await client.post(URL, json=payload)).status_code == 200


async def test_models_health_and_default_model(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    served = ["sim-chat", "sim-thinker", "sim-sglang-thinker", "sim-embed"]
    assert [m["id"] for m in models["data"]] == served
    assert models["data"][0]["owned_by"] == "vllm"
    health = await client.get("/health")
    assert health.status_code == 200 and health.content == b""
    no_model = await client.post(URL, json={"messages": [{"role": "user", "content": "hi"}]})
    assert no_model.json()["model"] == "sim-chat"


async def test_api_key() -> None:
    transport = httpx.ASGITransport(app=create_sim_app(SimConfig(api_key=SecretStr("k1"))))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        denied = await client.post(URL, json=chat())
        assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.get("/health")).status_code == 200
        allowed = await client.post(URL, json=chat(), headers={"Authorization": "Bearer k1"})
        assert allowed.status_code == 200
        log = (await client.get("/sim/requests")).json()
        assert [entry["status"] for entry in log] == [401, 200]
        assert log[1]["headers"]["authorization"].startswith("sha256:")
        assert "k1" not in str(log)


async def test_small_vllm_rules(client: httpx.AsyncClient, chunks_of: ChunkParser) -> None:
    # An empty stream_options object still turns usage on: vLLM's include_usage defaults to true.
    chunks = chunks_of((await client.post(URL, json=chat(stream=True, stream_options={}))).text)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 24
    bad_tier = await client.post(URL, json=chat(service_tier="turbo"))
    assert bad_tier.status_code == 400 and bad_tier.json()["error"]["param"] == "service_tier"
    assert (await client.post(URL, json=chat(tools=[]))).status_code == 400
    assert (await client.post(URL, json=chat(n=2))).status_code == 400
    missing = await client.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


async def test_hidden_reasoning_still_counts(client: httpx.AsyncClient) -> None:
    body = (await client.post(URL, json=chat("sim-thinker", include_reasoning=False))).json()
    assert body["choices"][0]["message"]["reasoning"] is None
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 40


async def test_served_model_aliases() -> None:
    config = SimConfig(models=[SimModel(name="sim-chat", aliases=["chat"])])
    transport = httpx.ASGITransport(app=create_sim_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        await client.post("/sim/faults", json={"match": {"model": "sim-chat"}, "status": 500})
        assert (await client.post(URL, json=chat("chat"))).status_code == 500
        answered = await client.post(URL, json=chat("chat"))
        assert answered.status_code == 200 and answered.json()["model"] == "sim-chat"
        models = (await client.get("/v1/models")).json()["data"]
        assert [(m["id"], m["root"]) for m in models] == [
            ("sim-chat", "sim-chat"),
            ("chat", "sim-chat"),
        ]
    with pytest.raises(ValueError, match="unique"):
        SimConfig(models=[SimModel(name="a"), SimModel(name="b", aliases=["a"])])
