"""The OpenAI Agents SDK running a three-step tool-using agent to the end, four ways.

The simulator calls the offered tool twice (`metadata.sim_tool_rounds`, its chat route's
plan, gateway/sim/tool_calls.py), so the agent loop is: call -> tool -> call -> tool ->
answer. Each run must be one task in the ledger: three calls, the step kinds the gateway
infers (a user turn, then two tool results), and a task cost that is the calls' sum.
Over Responses to a `wire: responses` route, named by `X-Task-Id` or, with no task id,
chained by the SDK's `auto_previous_response_id` (which carries the gateway's task); over
Responses translated for a chat route; and over chat completions.
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
    OpenAIChatCompletionsModel,
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


async def _run(
    gateway: Gateway, api: str, alias: str, headers: dict[str, str], **options: Any
) -> Any:
    settings = ModelSettings(metadata={"sim_tool_rounds": "2"}, extra_headers=headers)
    # Closed inside the run's own loop: no socket is left to the loop's end.
    async with AsyncOpenAI(base_url=gateway.base_url, api_key="sk-agent", max_retries=0) as client:
        model: Any = (
            OpenAIResponsesModel(model=alias, openai_client=client)
            if api == "responses"
            else OpenAIChatCompletionsModel(model=alias, openai_client=client)
        )
        agent = Agent(
            name="fares",
            instructions="Answer fare questions with the get_fare tool.",
            tools=[get_fare],
            model=model,
            model_settings=settings,
        )
        config = RunConfig(tracing_disabled=True)
        return await Runner.run(
            agent, "What is the fare from A to B?", run_config=config, **options
        )


RUNS = [
    ("responses", "native", "/v1/responses", True),  # a wire: responses route
    ("responses", "native", "/v1/responses", False),  # no task id: the SDK's chain carries it
    ("responses", "chat", "/v1/chat/completions", True),  # translated for a chat route
    ("chat_completions", "chat", "/v1/chat/completions", True),
]


@pytest.mark.parametrize(("api", "alias", "path", "named"), RUNS)
def test_a_three_step_agent_is_one_task(
    gateway: Gateway, sim: SimControl, api: str, alias: str, path: str, named: bool
) -> None:
    CALLS.clear()
    headers = {"X-Task-Id": f"agent-{api}-{alias}"} if named else {}
    chained = {"auto_previous_response_id": True} if not named else {}
    result = asyncio.run(_run(gateway, api, alias, headers, **chained))
    assert result.final_output
    assert len(CALLS) == 2  # the tool ran twice, then the model answered
    records = [r for r in sim.requests() if r["path"] == path]
    assert len(records) == 3
    gateway.last(3)
    contexts = gateway.seen[-3:]
    tasks = {ctx.task.task_id for ctx in contexts if ctx.task is not None}
    assert len(tasks) == 1
    (task_id,) = tasks
    if named:
        assert task_id == f"agent-{api}-{alias}"
    kinds = [ctx.task.step_kind for ctx in contexts if ctx.task is not None]
    assert kinds == ["user_turn", "tool_result", "tool_result"]
    task = httpx.get(f"{gateway.base_url}/tasks/{task_id}", timeout=30).json()
    assert task["request_count"] == 3 and task["ended"] == "open"  # no X-Task-Done sent
    costs = [ctx.cost.total for ctx in contexts if ctx.cost is not None]
    assert len(costs) == 3 and all(cost > 0 for cost in costs)
    assert Decimal(task["cost"]["total"]) == sum(costs)
