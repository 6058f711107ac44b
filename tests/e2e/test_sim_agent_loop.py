"""A tool-using agent loop through the gateway, with the `openai` SDK as the agent.

user -> tool call -> tool result -> tool call -> tool result -> answer: the simulator
calls the offered tool by its plan (`metadata.sim_tool_rounds`), the agent runs the tool
and sends the result back, and the gateway books the whole loop as one task whose rows
have the step kinds of an agent loop and whose cost is the sum of its calls.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import httpx
import orjson

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "lookup_fare",
            "description": "The fare between two stops.",
            "parameters": {
                "type": "object",
                "properties": {"origin": {"type": "string"}, "to": {"type": "string"}},
                "required": ["origin", "to"],
            },
        },
    }
]


def _task(gateway: Gateway, task: str, requests: int) -> dict[str, Any]:
    """The task once the ledger holds all its rows and its finish."""
    deadline = time.monotonic() + 10
    while True:
        body = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30).json()
        if body.get("request_count") == requests and body.get("status") == "success":
            return dict(body)
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def test_a_two_tool_agent_loop_is_one_task_with_its_step_kinds(
    gateway: Gateway, sim: SimControl
) -> None:
    client = gateway.sdk()
    task = "agent-loop-tools"
    messages: list[Any] = [{"role": "user", "content": "What is the fare from A to C via B?"}]
    finishes = []
    for _ in range(5):  # the plan answers after two calls; five is a runaway guard
        reply = client.chat.completions.create(
            model="chat",
            messages=messages,
            tools=TOOLS,
            metadata={"sim_tool_rounds": "2"},
            extra_headers={"X-Task-Id": task},
        )
        choice = reply.choices[0]
        finishes.append(choice.finish_reason)
        messages.append(choice.message.model_dump(exclude_none=True))
        if choice.finish_reason != "tool_calls":
            break
        for call in choice.message.tool_calls or []:
            arguments = orjson.loads(call.function.arguments)  # type: ignore[union-attr]
            assert set(arguments) == {"origin", "to"}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "2.50 USD"})
    assert finishes == ["tool_calls", "tool_calls", "stop"]
    assert messages[-1]["content"]  # the answer, in text
    done = httpx.post(f"{gateway.base_url}/tasks/{task}/finish", json={"outcome": "success"})
    assert done.status_code == 200, done.text
    sent = [r for r in sim.requests() if r["path"] == "/v1/chat/completions"]
    assert [r["finish_reason"] for r in sent] == finishes
    row = _task(gateway, task, 3)
    rows = sorted(row["requests"], key=lambda r: r["created_at"])
    assert [r["step_kind"] for r in rows] == ["user_turn", "tool_result", "tool_result"]
    assert [r["completion_tokens"] for r in rows] == [r["completion_tokens"] for r in sent]
    assert Decimal(row["cost"]["total"]) == sum(Decimal(r["cost_total"]) for r in rows) > 0
    # Each call extends the last: the upstream's prefix cache hits from the second call on.
    assert all(r["cached_tokens"] > 0 for r in rows[1:])
