"""What a client receives from the gateway, read off the wire and checked against OpenAI's schemas."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.conformance.openapi_schemas import CHAT_CHUNK, CHAT_COMPLETION, ERROR, violations

GPU = {
    "cost_per_hour": "3.60",
    "prefill_tokens_per_second": 10000,
    "decode_tokens_per_second": 1000,
}
# One route per backend family the gateway supports, all on the simulator.
FAMILY_ROUTES = {
    "openai-chat": {"model": "sim-chat", "family": "openai"},
    "vllm-chat": {"model": "sim-chat", "family": "vllm"},
    "vllm-thinker": {"model": "sim-thinker", "family": "vllm"},
    "sglang-thinker": {"model": "sim-sglang-thinker", "family": "sglang"},
}
LITELLM_ROUTES = ("claude",)
ROUTES = (*FAMILY_ROUTES, *LITELLM_ROUTES)


def write_config(directory: Path, sim_url: str, extra: dict[str, Any] | None = None) -> Path:
    """A configuration file with every family's route on the simulator at `sim_url`."""
    models: dict[str, Any] = {
        alias: {"provider": "openai", "base_url": f"{sim_url}/v1", **route}
        for alias, route in FAMILY_ROUTES.items()
    }
    models["claude"] = {
        "provider": "anthropic",
        "model": "claude-sim",
        "base_url": sim_url,
        "api_key_env": "FAREBOX_TEST_ANTHROPIC_KEY",
    }
    models.update(extra or {})
    prices: dict[str, Any] = {alias: {"gpu": GPU} for alias in FAMILY_ROUTES}
    prices["claude"] = {"base": "claude-sonnet-4-5"}
    # One attempt per request: a relayed upstream error is then the upstream's own.
    routing = {alias: {"retry": {"attempts": 0}} for alias in models}
    path = directory / "conformance.yaml"
    config = {"models": models, "prices": prices, "routing": routing}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Exchange:
    """One response as the client got it: status, headers and every JSON object it carried."""

    status: int
    headers: httpx.Headers
    objects: list[Any]
    streamed: bool


def post_chat(base_url: str, body: dict[str, Any] | bytes) -> Exchange:
    """POST a chat completion and read the reply, whole or streamed, off the wire."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer sk-client-key"}
    response = httpx.post(
        f"{base_url}/chat/completions", content=content, headers=headers, timeout=60
    )
    streamed = response.headers.get("content-type", "").startswith("text/event-stream")
    objects = sse_objects(response.text) if streamed else [response.json()]
    return Exchange(response.status_code, response.headers, objects, streamed)


def sse_objects(text: str) -> list[Any]:
    """The JSON objects of an SSE body; asserts it ends with `data: [DONE]`."""
    events = [event for event in text.split("\n\n") if event.strip()]
    assert events and events[-1] == "data: [DONE]", events[-3:]
    objects = []
    for event in events[:-1]:
        assert event.startswith("data: "), event
        objects.append(json.loads(event.removeprefix("data: ")))
    return objects


def schema_for(exchange: Exchange, obj: Any) -> str:
    """The schema an object the gateway sent must follow."""
    if isinstance(obj, dict) and "error" in obj:
        return ERROR
    return CHAT_CHUNK if exchange.streamed else CHAT_COMPLETION


def nonconforming(exchange: Exchange) -> list[str]:
    """Each schema violation in the exchange, naming the object it is in."""
    found = []
    for number, obj in enumerate(exchange.objects):
        schema = schema_for(exchange, obj)
        found += [f"#{number} {schema} {v}; got {obj}" for v in violations(schema, obj)]
    return found
