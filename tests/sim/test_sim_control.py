"""The /sim/ control routes: request log, fault injection and reset."""

from __future__ import annotations

import base64
from typing import Any

import httpx

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


def chat(model: str = "sim-chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


async def arm(client: httpx.AsyncClient, **fault: Any) -> None:
    response = await client.post("/sim/faults", json=fault)
    assert response.status_code == 201, response.text


async def test_log_keeps_exact_bytes_and_redacts(client: httpx.AsyncClient) -> None:
    raw = b'{"model":  "sim-chat",\n "messages": [{"role": "user", "content": "caf\xc3\xa9"}]}'
    headers = {"Content-Type": "application/json", "X-Api-Key": "hidden", "X-Trace": "t1"}
    assert (await client.post(CHAT, content=raw, headers=headers)).status_code == 200
    [entry] = (await client.get("/sim/requests")).json()
    assert base64.b64decode(entry["body_b64"]) == raw
    assert entry["headers"]["x-trace"] == "t1"
    assert entry["headers"]["x-api-key"].startswith("sha256:")
    assert entry["path"] == CHAT and entry["model"] == "sim-chat" and entry["stream"] is False
    assert entry["completed"] is True and entry["cancelled"] is False
    assert entry["prompt_tokens"] > 0 and entry["completion_tokens"] == 24
    assert entry["planned_prefill_ms"] == 0.0
    assert (await client.delete("/sim/requests")).status_code == 204
    assert (await client.get("/sim/requests")).json() == []


async def test_error_fault_counts_down(client: httpx.AsyncClient) -> None:
    await arm(client, status=429, count=2, headers={"retry-after": "3"})
    for _ in range(2):
        limited = await client.post(CHAT, json=chat())
        assert limited.status_code == 429 and limited.headers["retry-after"] == "3"
        error = limited.json()["error"]
        assert error["code"] == 429 and error["type"] == "Too Many Requests"
    assert (await client.post(CHAT, json=chat())).status_code == 200
    assert (await client.get("/sim/faults")).json() == []
    log = (await client.get("/sim/requests")).json()
    assert [(e["status"], e["fault"]) for e in log] == [(429, True), (429, True), (200, False)]


async def test_fault_matching(client: httpx.AsyncClient) -> None:
    await arm(client, match={"model": "sim-thinker"}, status=500)
    await arm(client, match={"service_tier": "flex"}, status=503, body={"custom": True})
    assert (await client.post(CHAT, json=chat())).status_code == 200
    flex = await client.post(CHAT, json=chat(service_tier="flex"))
    assert flex.status_code == 503 and flex.json() == {"custom": True}
    thinker = await client.post(CHAT, json=chat("sim-thinker"))
    assert thinker.status_code == 500 and thinker.json()["error"]["type"] == "InternalServerError"


async def test_default_tier_matches_absent_tier(client: httpx.AsyncClient) -> None:
    await arm(client, match={"service_tier": "default", "path": CHAT}, status=500)
    assert (await client.post(CHAT, json=chat())).status_code == 500


async def test_anthropic_fault_shape(client: httpx.AsyncClient) -> None:
    await arm(client, match={"path": MESSAGES}, status=529)
    assert (await client.post(CHAT, json=chat())).status_code == 200
    body = {"model": "claude-sim", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    response = await client.post(MESSAGES, json=body, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 529
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"


async def test_bad_fault_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/sim/faults", json={"status": 429, "colour": "red"})
    assert response.status_code == 400


async def test_reset_clears_everything(client: httpx.AsyncClient) -> None:
    await client.post(CHAT, json=chat(messages=[{"role": "user", "content": "x " * 100}]))
    await arm(client, status=500)
    assert (await client.post("/sim/reset")).status_code == 204
    assert (await client.get("/sim/faults")).json() == []
    assert (await client.get("/sim/requests")).json() == []
    again = await client.post(CHAT, json=chat(messages=[{"role": "user", "content": "x " * 100}]))
    assert again.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    await arm(client, status=500)
    assert (await client.delete("/sim/faults")).status_code == 204
    assert (await client.post(CHAT, json=chat())).status_code == 200


async def test_runtime_config_until_reset(client: httpx.AsyncClient) -> None:
    changed = await client.post("/sim/config", json={"decode_ms_per_token": 0.5, "seed": 9})
    assert changed.status_code == 200 and changed.json()["decode_ms_per_token"] == 0.5
    response = await client.post(CHAT, json=chat())
    assert float(response.headers["x-sim-decode-ms"]) == 24 * 0.5
    assert (await client.post("/sim/config", json={"block_size": 32})).status_code == 400
    assert (await client.post("/sim/config", json={"decode_ms_per_token": -1})).status_code == 400
    assert (await client.post("/sim/config", json=[1])).status_code == 400
    await client.post("/sim/reset")
    assert (await client.get("/sim/config")).json()["decode_ms_per_token"] == 0.0


async def test_plain_model_refuses_continuation(client: httpx.AsyncClient) -> None:
    body = chat(
        messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        continue_final_message=True,
        add_generation_prompt=False,
    )
    response = await client.post(CHAT, json=body)
    assert response.status_code == 400 and response.json()["error"]["code"] == 400


async def test_usage_fault_replaces_the_usage_object(client: httpx.AsyncClient) -> None:
    nonsense = {"prompt_tokens": -5, "completion_tokens": "many", "extra": [None]}
    await arm(client, usage=nonsense, count=2)
    assert (await client.post(CHAT, json=chat())).json()["usage"] == nonsense
    streamed = await client.post(
        CHAT, json=chat(stream=True, stream_options={"include_usage": True})
    )
    events = [line for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert '"usage":{"prompt_tokens":-5,' in events[-1]
    assert (await client.post(CHAT, json=chat())).json()["usage"]["prompt_tokens"] > 0
