"""LangChain's ChatOpenAI running a three-step tool loop through the gateway, six ways.

`ChatOpenAI(...).bind_tools([get_fare])` over chat completions and with
`use_responses_api=True` (to a `wire: responses` route, forwarded natively, also chained by
`use_previous_response_id` with no task id, and translated for a chat route), invoked and
streamed. The simulator calls the offered tool twice
(`metadata.sim_tool_rounds`, gateway/sim/tool_calls.py), so the loop is call -> tool -> call -> tool -> answer, and
each run must be one task in the ledger (named by `X-Task-Id` in `default_headers`):
three calls, the step kinds the gateway infers, a task cost that is the calls' sum.
The LangChain example in docs/protocols.md runs here too, against this gateway.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from gateway.app import create_app
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, _wait_warm
from tests.e2e.test_responses import CONFIG
from tests.servers import ServerThread

CALLS: list[tuple[str, str]] = []


@tool
def get_fare(origin: str, to: str) -> str:
    """Look up the fare between two stops."""
    CALLS.append((origin, to))
    return f"The fare from {origin} to {to} is $2.50."


@pytest.fixture(scope="module")
def gateway(
    sim_server: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """One gateway for the file (the simulator is reset per test by `sim`)."""
    data_dir = tmp_path_factory.mktemp("langchain-gateway")
    config = data_dir / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim_server.url))
    seen: list[RequestContext] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)
        settings = Settings(data_dir=data_dir, config=config)
        app = create_app(settings, None, observers=[seen.append])
        server = ServerThread(app, settings).start()
    gateway = Gateway(server, seen, settings)
    _wait_warm(server, settings)
    yield gateway
    gateway.stop()


def _run(gateway: Gateway, alias: str, responses: bool, stream: bool, task: str) -> AIMessage:
    chained = task == "chained"  # no task id: LangChain's previous_response_id carries it
    llm = ChatOpenAI(
        base_url=gateway.base_url,
        api_key="sk-langchain",  # type: ignore[arg-type]
        model=alias,
        use_responses_api=responses,
        use_previous_response_id=chained,
        default_headers={} if chained else {"X-Task-Id": task},
        extra_body={"metadata": {"sim_tool_rounds": "2"}},
        max_retries=0,
    )
    model = llm.bind_tools([get_fare])
    messages: list[BaseMessage] = [HumanMessage("What is the fare from A to B?")]
    for _ in range(4):
        reply = _stream(model, messages) if stream else model.invoke(messages)
        assert isinstance(reply, AIMessage)
        messages.append(reply)
        if not reply.tool_calls:
            return reply
        messages.extend(get_fare.invoke(call) for call in reply.tool_calls)
    raise AssertionError("the model never answered")


def _stream(model: Any, messages: list[BaseMessage]) -> AIMessage:
    reply: Any = None
    for chunk in model.stream(messages):
        reply = chunk if reply is None else reply + chunk
    assert reply is not None
    return reply


RUNS = [
    ("chat", False, False, True),
    ("chat", False, True, True),
    ("native", True, False, True),  # use_responses_api=True to a wire: responses route
    ("native", True, True, True),
    ("native", True, False, False),  # use_previous_response_id=True, no X-Task-Id
    ("chat", True, True, True),  # use_responses_api=True translated for a chat route
]


@pytest.mark.parametrize(("alias", "responses", "stream", "named"), RUNS)
def test_a_langchain_tool_loop_is_one_task(
    gateway: Gateway, sim: SimControl, alias: str, responses: bool, stream: bool, named: bool
) -> None:
    CALLS.clear()
    before = len(gateway.seen)
    named_id = f"langchain-{alias}-{'responses' if responses else 'chat'}-{stream}"
    answer = _run(gateway, alias, responses, stream, named_id if named else "chained")
    assert answer.text
    assert len(CALLS) == 2  # the tool ran twice, then the model answered
    path = "/v1/responses" if alias == "native" else "/v1/chat/completions"
    records = [r for r in sim.requests() if r["path"] == path]
    assert len(records) == 3 and all(r["stream"] is stream for r in records)
    bodies = [orjson.loads(base64.b64decode(str(r["body_b64"]))) for r in records]
    assert all(b["metadata"]["sim_tool_rounds"] == "2" for b in bodies)
    if not named:  # the gateway expanded LangChain's chain: the upstream got every item
        assert [len(b["input"]) for b in bodies] == [1, 3, 5]
        assert not any("previous_response_id" in b for b in bodies)
    tools = [b["tools"][0] for b in bodies]  # Responses: flat; chat: under "function"
    assert all(t.get("name", t.get("function", {}).get("name")) == "get_fare" for t in tools)
    gateway.last(before + 3)
    contexts = gateway.seen[before:]
    assert len(contexts) == 3
    tasks = {ctx.task.task_id for ctx in contexts if ctx.task is not None}
    assert len(tasks) == 1
    (task_id,) = tasks
    assert task_id == named_id if named else task_id.startswith("chain-")
    kinds = [ctx.task.step_kind for ctx in contexts if ctx.task is not None]
    assert kinds == ["user_turn", "tool_result", "tool_result"]
    task = httpx.get(f"{gateway.base_url}/tasks/{task_id}", timeout=30).json()
    assert task["request_count"] == 3
    costs = [ctx.cost.total for ctx in contexts if ctx.cost is not None]
    assert len(costs) == 3 and all(cost > 0 for cost in costs)
    assert Decimal(task["cost"]["total"]) == sum(costs)


def test_the_docs_langchain_example_runs_as_one_task(
    gateway: Gateway, sim: SimControl, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "protocols.md").read_text()
    block = re.search(r"### LangChain.*?```python\n(.*?)```", doc, re.S)
    assert block, "docs/protocols.md has no LangChain example"
    code = block.group(1).replace("http://127.0.0.1:4000/v1", gateway.base_url)
    exec(code.replace('model="sim-chat"', 'model="native"'), {})  # this file's route alias
    assert capsys.readouterr().out.strip()
    assert [r["path"] for r in sim.requests()] == ["/v1/responses"] * 3
    task = httpx.get(f"{gateway.base_url}/tasks/demo-langchain", timeout=30).json()
    assert task["request_count"] == 3 and Decimal(task["cost"]["total"]) > 0
