"""An agent's steps reuse the task's earlier message segments and answer as a whole cut does.

Two callers run the same agent, step after step, each under its own task. One sends
compact JSON, so each step repeats the previous one's bytes and the prefix check cuts only
the new messages (`gateway.prefix.reuse`); the other changes its whitespace every step,
so nothing is ever reused. The prompts are the same (whitespace is not prompt text): the
prefix headers, what the simulator received and what the ledger booked must be the same.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.prefix.reuse import MIN_BYTES
from tests.e2e.loop_bench import serving

STEPS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The simulator (child process) and a gateway in front of it: their URLs."""
    with serving(tmp_path_factory.mktemp("agent-reuse")) as (sim_url, url, _):
        yield sim_url, url


def _history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(150):
        messages += [
            {"role": "user", "content": f"Turn {turn}: read module {turn}."},
            {"role": "assistant", "content": f"def step_{turn}(x):\n    return x + 1\n" * 16},
        ]
    return messages


def _rows(url: str, task: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        reply = httpx.get(f"{url}/tasks/{task}", timeout=30)
        if reply.status_code == 200 and reply.json().get("request_count") == count:
            return sorted(reply.json()["requests"], key=lambda row: row["created_at"])
        assert time.monotonic() < deadline, reply.text
        time.sleep(0.05)


def _run(sim_url: str, url: str, caller: str, spaced: bool) -> list[tuple[Any, ...]]:
    """Each step's prefix headers, the messages the simulator got and the booked tokens."""
    messages = _history()
    seen: list[tuple[Any, ...]] = []
    headers = {"X-Task-Id": f"agent-{caller}", "Authorization": f"Bearer {caller}"}
    for step in range(STEPS):
        messages = [*messages, {"role": "user", "content": f"Step {step}: continue."}]
        body = {"model": "chat", "messages": messages, "max_tokens": 8}
        if spaced:  # other bytes every step: nothing repeats
            raw = json.dumps(body, separators=(",", ":" + " " * (step % 2))).encode()
        else:
            raw = orjson.dumps(body)
        assert len(raw) > MIN_BYTES
        reply = httpx.post(f"{url}/chat/completions", content=raw, headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        received = httpx.get(f"{sim_url}/sim/requests", timeout=30).json()[-1]
        sent = orjson.loads(base64.b64decode(received["body_b64"]))
        assert sent["messages"] == messages
        row = _rows(url, f"agent-{caller}", step + 1)[-1]
        seen.append(
            (
                reply.headers["x-farebox-prefix"],
                reply.headers["x-farebox-expected-cached-tokens"],
                row["prompt_tokens"],  # not cached tokens: the simulator's cache is shared
            )
        )
        messages = [
            *messages,
            {"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]},
        ]
    return seen


def test_reused_and_whole_cuts_answer_alike(served: tuple[str, str]) -> None:
    sim_url, url = served
    reused = _run(sim_url, url, "compact", spaced=False)
    whole = _run(sim_url, url, "spaced", spaced=True)
    assert reused == whole
    assert all(step[0] == "stable" for step in reused[1:]), reused
    assert all(int(step[1]) > 0 for step in reused[1:]), reused
