"""A large prompt's messages are cut from the client's own bytes and answer as a dump does.

Two callers send the same fresh prompts (a new system prompt every request, as
`loadgen --history-mode fresh` does, the history after it unchanged). One writes compact
UTF-8 JSON, orjson's own form, so the prefix check takes each message's bytes from the
body (`gateway.prefix.rawcut`); the other writes the standard library's `", "` and `": "`
with `\\u` escapes, so every message is dumped again. The prompts are the same: the prefix
headers and what the simulator received must be the same.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.prefix.rawcut import MIN_BYTES
from tests.e2e.loop_bench import serving

REQUESTS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The simulator (child process) and a gateway in front of it: their URLs."""
    with serving(tmp_path_factory.mktemp("fresh-raw-cut")) as (sim_url, url, _):
        yield sim_url, url


def _messages(request: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent. Session {request} §."}
    ]
    for turn in range(120):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "read"}}
        messages += [
            {"role": "user", "content": f"Turn {turn}: read module {turn} (naïve)."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "\tx = 1\n" * 40},
        ]
    return [*messages, {"role": "user", "content": f"Next step {request}: continue."}]


def _run(sim_url: str, url: str, caller: str, compact: bool) -> list[tuple[str, str]]:
    """Each request's prefix headers, after checking what the simulator received."""
    seen: list[tuple[str, str]] = []
    for request in range(REQUESTS):
        body = {"model": "chat", "messages": _messages(request), "max_tokens": 8}
        raw = orjson.dumps(body) if compact else json.dumps(body).encode()
        assert len(raw) > MIN_BYTES
        reply = httpx.post(
            f"{url}/chat/completions",
            content=raw,
            headers={"Authorization": f"Bearer {caller}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        received = httpx.get(f"{sim_url}/sim/requests", timeout=30).json()[-1]
        assert orjson.loads(base64.b64decode(received["body_b64"]))["messages"] == body["messages"]
        seen.append(
            (reply.headers["x-farebox-prefix"], reply.headers["x-farebox-expected-cached-tokens"])
        )
    return seen


def test_cut_from_the_bytes_and_dumped_answer_alike(served: tuple[str, str]) -> None:
    sim_url, url = served
    taken = _run(sim_url, url, "compact", compact=True)
    dumped = _run(sim_url, url, "spaced", compact=False)
    assert taken == dumped
    # every request changes its system prompt: a break there, nothing cached before it
    assert all(value.startswith("break; segment=system") for value, _ in taken[1:]), taken
