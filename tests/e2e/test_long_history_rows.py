"""A history of 40,000 messages takes the large-body path and comes out as a small one would.

Over 2 MiB and 8,192 segments: the body is parsed a slice at a time, the prefix check runs
in a worker thread with its per-segment columns moved into tuples (`moved_tuple`), and the
release after the reply detaches those tuples and frees their items a slice at a time
(`take_items`). None of that may change what the gateway computes: the simulator receives
the client's messages, the ledger books the tokens the simulator counted, and the prefix
headers are those the prefix package gives for the same body. The gateway and simulator
are `bench/loop_stall.py`'s (a simulator whose model takes any length of input).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import orjson
import pytest

from gateway.pipeline.offload import RELEASE_BYTES
from gateway.pipeline.prefix import MAX_REMEMBERED_SEGMENTS, prefix_headers
from gateway.prefix import PrefixChecker, rule_for
from tests.e2e.loop_bench import serving

COUNT = 40_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The simulator (child process) and a gateway in front of it: their URLs."""
    with serving(tmp_path_factory.mktemp("long-history")) as (sim_url, url, _):
        yield sim_url, url


def _history() -> list[dict[str, str]]:
    roles = ("user", "assistant")
    turns = [{"role": roles[i % 2], "content": f"step {i}: done, next"} for i in range(COUNT)]
    turns[2]["content"] = "Run started at 2026-03-12T10:00:07Z."  # volatile: a finding
    return [*turns, {"role": "user", "content": "What is left to do?"}]


def _task_rows(url: str, task: str, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        reply = httpx.get(f"{url}/tasks/{task}", timeout=30)
        if reply.status_code == 200 and reply.json().get("request_count") == count:
            return dict(reply.json())
        assert time.monotonic() < deadline, reply.text
        time.sleep(0.05)


def test_a_long_history_is_forwarded_checked_and_booked_as_sent(
    served: tuple[str, str],
) -> None:
    sim_url, url = served
    messages = _history()
    body = {"model": "chat", "messages": messages, "max_tokens": 8}
    assert len(orjson.dumps(body)) > RELEASE_BYTES and COUNT > MAX_REMEMBERED_SEGMENTS
    # What the prefix package gives for the body the upstream receives (first seen).
    expected = prefix_headers(
        PrefixChecker().check({**body, "model": "sim-chat"}, rule_for("vllm"))
    )
    assert expected["x-farebox-prefix"].startswith("volatile; segment=messages[2];")
    headers = {"X-Task-Id": "task-long-history"}
    for attempt in (1, 2):  # the second: no history is kept for so long a prompt
        reply = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-farebox-prefix"] == expected["x-farebox-prefix"]
        cached = reply.headers["x-farebox-expected-cached-tokens"]
        assert cached == expected["x-farebox-expected-cached-tokens"] == "0"
        received = httpx.get(f"{sim_url}/sim/requests", timeout=30).json()[-1]
        sent = orjson.loads(base64.b64decode(received["body_b64"]))  # type: ignore[arg-type]
        assert sent["messages"] == messages and sent["model"] == "sim-chat"
        task = _task_rows(url, "task-long-history", attempt)
        row = sorted(task["requests"], key=lambda r: r["created_at"])[-1]
        assert row["status_code"] == 200
        assert (
            row["prompt_tokens"]
            == received["prompt_tokens"]
            == reply.json()["usage"]["prompt_tokens"]
        )
        assert Decimal(row["cost_total"]) > 0
