"""The OpenAI Agents SDK, over Responses, running a three-step tool-using agent to the end.

The simulator's /v1/responses calls the offered tool twice (`metadata.sim_tool_rounds`,
gateway/sim/responses_tools.py), so the agent loop is: call -> tool -> call -> tool ->
answer. Each run must be one task in the ledger: three calls, the step kinds the gateway
infers (a user turn, then two tool results), and a task cost that is the calls' sum.
Once with the task named by `X-Task-Id`; once with none, the SDK chaining its calls by
`previous_response_id` (`auto_previous_response_id`), which carries the gateway's task.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.test_responses import CONFIG

CALLS: list[tuple[str, str]] = []


@function_tool
def get_fare(origin: str, to: str) -> str:
    """Look up the fare between two stops."""
    CALLS.append((origin, to))
    return f"The fare from {origin} to {to} is $2.50."


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


async def _run(gateway: Gateway, headers: dict[str, str], **options: Any) -> Any:
    settings = ModelSettings(metadata={"sim_tool_rounds": "2"}, extra_headers=headers)
    # Closed inside the run's own loop: no socket is left to the loop's end.
    async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-agent", max_retries=0) as client:
        agent = Agent(
            name="fares",
            instructions="Answer fare questions with the get_fare tool.",
            tools=[get_fare],
            model=OpenAIResponsesModel(model="native", openai_client=client),
            model_settings=settings,
        )
        config = RunConfig(tracing_disabled=True)
        return await Runner.run(
            agent, "What is the fare from A to B?", run_config=config, **options
        )


@pytest.mark.parametrize("named", [True, False])
def test_a_three_step_agent_is_one_task(gateway: Gateway, sim: SimControl, named: bool) -> None:
    CALLS.clear()
    headers = {"X-Task-Id": "agent-run"} if named else {}
    result = asyncio.run(_run(gateway, headers, auto_previous_response_id=not named))
    assert result.final_output
    assert CALLS == [("sample", "sample"), ("sample", "sample")]  # the tool ran twice
    records = [r for r in sim.requests() if r["path"] == "/v1/responses"]
    assert len(records) == 3
    gateway.last(3)
    contexts = gateway.seen[-3:]
    tasks = {ctx.task.task_id for ctx in contexts if ctx.task is not None}
    assert len(tasks) == 1
    (task_id,) = tasks
    if named:
        assert task_id == "agent-run"
    kinds = [ctx.task.step_kind for ctx in contexts if ctx.task is not None]
    assert kinds == ["user_turn", "tool_result", "tool_result"]
    task = httpx.get(f"{gateway.base_url}/tasks/{task_id}", timeout=30).json()
    assert task["request_count"] == 3 and task["ended"] == "open"  # no X-Task-Done sent
    costs = [ctx.cost.total for ctx in contexts if ctx.cost is not None]
    assert len(costs) == 3 and all(cost > 0 for cost in costs)
    assert Decimal(task["cost"]["total"]) == sum(costs)
