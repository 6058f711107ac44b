"""Cost per request and per task, end to end: SDK -> gateway -> simulator -> ledger."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal

import httpx
import openai
import pytest
from typer.testing import CliRunner

from gateway import cli
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.pg import fresh_pg_database, pg_url

# Prices of the test configuration (tests/e2e/conftest.py), per token.
GPU_INPUT, GPU_OUTPUT = Decimal("1e-7"), Decimal("1e-6")  # $3.60/h at 10k / 1k tokens/s
SONNET_INPUT, SONNET_CACHED, SONNET_OUTPUT = Decimal("3e-6"), Decimal("3e-7"), Decimal("15e-6")

HISTORY = [
    {"role": "system", "content": "You are a careful agent. " * 40},
    {"role": "user", "content": "Plan the migration of the billing service."},
]


def _client(gateway: Gateway, task: str, team: str) -> openai.OpenAI:
    headers = {"X-Task-Id": task, "X-Farebox-Team": team, "X-Farebox-Project": "billing"}
    return gateway.sdk(default_headers=headers)


def _gpu_cost(usage: openai.types.CompletionUsage) -> Decimal:
    details = usage.prompt_tokens_details
    cached = details.cached_tokens or 0 if details else 0
    return (usage.prompt_tokens - cached) * GPU_INPUT + usage.completion_tokens * GPU_OUTPUT


def _sonnet_cost(usage: openai.types.CompletionUsage) -> Decimal:
    details = usage.prompt_tokens_details
    cached = details.cached_tokens or 0 if details else 0
    return (
        (usage.prompt_tokens - cached) * SONNET_INPUT
        + cached * SONNET_CACHED
        + usage.completion_tokens * SONNET_OUTPUT
    )


def run_agent_task(gateway: Gateway, task: str, team: str) -> list[Decimal]:
    """Four requests of one task, streamed and not, on two backends; returns each cost."""
    client = _client(gateway, task, team)
    costs: list[Decimal] = []

    raw = client.chat.completions.with_raw_response.create(model="chat", messages=HISTORY)  # type: ignore[arg-type]
    first = raw.parse()
    assert first.usage is not None
    costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
    assert costs[-1] == _gpu_cost(first.usage)
    assert first.usage.model_extra is not None
    assert Decimal(first.usage.model_extra["cost"]["total"]) == costs[-1]
    assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == costs[-1]

    # The same history again: the simulator's prefix cache now serves most of it.
    history = [*HISTORY, {"role": "assistant", "content": first.choices[0].message.content}]
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
    second = raw.parse()
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens_details.cached_tokens or 0) > 0
    costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
    assert costs[-1] == _gpu_cost(second.usage)
    assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == sum(costs)

    stream = client.chat.completions.create(
        model="claude",
        messages=history,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    usage_chunk = [chunk for chunk in stream if chunk.usage is not None][-1].usage
    assert usage_chunk is not None and usage_chunk.model_extra is not None
    costs.append(Decimal(usage_chunk.model_extra["cost"]["total"]))
    assert costs[-1] == _sonnet_cost(usage_chunk)

    raw = client.chat.completions.with_raw_response.create(
        model="claude",
        messages=history,  # type: ignore[arg-type]
        extra_headers={"X-Task-Done": "true"},
    )
    last = raw.parse()
    assert last.usage is not None
    costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
    assert costs[-1] == _sonnet_cost(last.usage)
    assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == sum(costs)
    return costs


def _task(gateway: Gateway, task: str) -> dict[str, object]:
    response = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _assert_task_totals(gateway: Gateway, task: str, costs: list[Decimal]) -> dict[str, object]:
    body = _task(gateway, task)
    cost = body["cost"]
    assert isinstance(cost, dict)
    assert Decimal(cost["total"]) == sum(costs)
    assert body["request_count"] == len(costs) == len(body["requests"])  # type: ignore[arg-type]
    assert body["status"] == "success"
    assert body["team"] == "finance"
    assert body["first_ttft_ms"] is not None
    parts = sum(Decimal(cost[k]) for k in ("input", "cached", "cache_write", "output", "reasoning"))
    assert parts == Decimal(cost["total"])
    return body


def test_task_total_is_the_sum_of_its_requests(gateway: Gateway) -> None:
    costs = run_agent_task(gateway, "task-sqlite", "finance")
    body = _assert_task_totals(gateway, "task-sqlite", costs)
    requests = body["requests"]
    assert isinstance(requests, list)
    assert sorted(Decimal(r["cost_total"]) for r in requests) == sorted(costs)
    assert {r["model_alias"] for r in requests} == {"chat", "claude"}
    # Token times only where they were seen (the stream); every call has its duration.
    streamed = [r for r in requests if r["streamed"]]
    whole = [r for r in requests if not r["streamed"]]
    assert len(streamed) == 1 and len(whole) == 3
    assert streamed[0]["ttft_ms"] is not None and streamed[0]["ttfat_ms"] is not None
    assert all(r["ttft_ms"] is None and r["ttfat_ms"] is None for r in whole)
    assert all(r["decode_tps"] is None for r in whole)
    assert all(r["duration_ms"] is not None for r in requests)
    assert body["first_ttft_ms"] == streamed[0]["ttft_ms"]  # the first call that had one


def test_metrics_show_requests_tokens_cost_and_task_cost(gateway: Gateway) -> None:
    run_agent_task(gateway, "task-metrics", "finance")
    task = _task(gateway, "task-metrics")  # booked (and observed) once the ledger commits
    text = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert 'farebox_task_cost_usd_count{outcome="success",team="finance"} 1.0' in text
    # The metric names each request's backend as its ledger row does.
    rows = task["requests"]
    assert isinstance(rows, list)
    backends = {r["model_alias"]: r["backend"] for r in rows}
    for model, backend in backends.items():
        labels = f'backend="{backend}",model="{model}",status="200",tier="standard"'
        assert f"farebox_requests_total{{{labels}}} 2.0" in text
    assert 'farebox_tokens_total{kind="cached",model="chat"}' in text
    assert 'farebox_cost_usd_total{kind="output",model="claude"}' in text
    # claude: one stream, one whole reply; chat: two whole replies. Token times are
    # observed on the stream only; every request has its duration.
    for name in (
        "farebox_time_to_first_token_seconds_count",
        "farebox_time_to_first_answer_token_seconds_count",
        "farebox_decode_tokens_per_second_count",
    ):
        assert f'{name}{{model="claude"}} 1.0' in text
        assert f'{name}{{model="chat"}}' not in text
    for model in ("claude", "chat"):
        assert f'farebox_request_duration_seconds_count{{model="{model}"}} 2.0' in text
    assert "task-metrics" not in text  # a task id is never a label


def test_spend_by_model_as_json_and_csv(gateway: Gateway) -> None:
    costs = run_agent_task(gateway, "task-spend", "finance")
    body = httpx.get(f"{gateway.base_url}/spend", params={"group_by": "model"}, timeout=30).json()
    by_model = {row["group"]: row for row in body["data"]}
    assert set(by_model) == {"chat", "claude"}
    assert sum(Decimal(row["cost_total"]) for row in body["data"]) == sum(costs)
    csv = httpx.get(f"{gateway.base_url}/spend", params={"format": "csv"}, timeout=30)
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0].startswith("group,request_count")
    stats = httpx.get(f"{gateway.base_url}/spend/tasks", timeout=30).json()["data"]
    assert stats[0]["group"] == "finance" and stats[0]["finished_tasks"] == 1
    assert Decimal(stats[0]["cost_p50"]) == sum(costs)


def test_finish_endpoint_and_unknown_task(gateway: Gateway) -> None:
    client = _client(gateway, "task-finish", "finance")
    client.chat.completions.create(model="chat", messages=HISTORY)  # type: ignore[arg-type]
    response = httpx.post(
        f"{gateway.base_url}/tasks/task-finish/finish", json={"outcome": "failed"}
    )
    assert response.status_code == 200
    assert _task(gateway, "task-finish")["status"] == "failed"
    bad = httpx.post(f"{gateway.base_url}/tasks/task-finish/finish", json={"outcome": "open"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "outcome"
    missing = httpx.get(f"{gateway.base_url}/tasks/nope", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "task_not_found"


def test_cost_estimate_endpoint(gateway: Gateway) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "input_tokens": 50000,
        "cached_tokens": 40000,
        "output_tokens": 15000,
    }
    estimate = httpx.post(f"{gateway.base_url}/cost/estimate", json=body, timeout=10).json()
    # 10,000 x $3/M + 40,000 x $0.30/M + 15,000 x $15/M
    assert Decimal(estimate["total"]) == Decimal("0.267")
    bad = httpx.post(f"{gateway.base_url}/cost/estimate", json={**body, "cached_tokens": 60000})
    assert bad.status_code == 400 and "cached_tokens" in bad.json()["error"]["message"]


@pytest.fixture
async def pg_ledger_url() -> AsyncIterator[str]:
    async with fresh_pg_database("farebox_e2e") as name:
        yield pg_url(name)


@pytest.mark.postgres
def test_task_totals_on_postgresql(make_gateway: GatewayFactory, pg_ledger_url: str) -> None:
    gateway = make_gateway(database_url=pg_ledger_url)
    costs = run_agent_task(gateway, "task-pg", "finance")
    _assert_task_totals(gateway, "task-pg", costs)


def test_finance_report_from_the_cli(gateway: Gateway) -> None:
    costs = run_agent_task(gateway, "task-report", "finance")
    _task(gateway, "task-report")  # committed to the ledger
    runner = CliRunner()
    url = gateway.settings.ledger_url()
    result = runner.invoke(cli.app, ["report", "--database-url", url, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    (team,) = document["tasks"]
    assert team["group"] == "finance" and team["finished_tasks"] == 1
    assert Decimal(team["cost_p50"]) == Decimal(team["cost_max"]) == sum(costs)
    assert sum(Decimal(row["cost_total"]) for row in document["spend"]) == sum(costs)
    table = runner.invoke(cli.app, ["report", "--database-url", url, "--group-by", "model"])
    assert table.exit_code == 0 and "Cost per finished task" in table.output
    assert "finance" in table.output and "claude" in table.output


def test_gpu_priced_model_planned_and_effective(gateway: Gateway) -> None:
    client = _client(gateway, "task-gpu", "ml")
    completion = client.chat.completions.create(model="chat", messages=HISTORY)  # type: ignore[arg-type]
    assert completion.usage is not None
    body = httpx.get(f"{gateway.base_url}/gpu", params={"hours": 2}, timeout=30).json()
    (chat,) = body["data"]
    assert chat["model"] == "chat" and Decimal(chat["gpu_cost_per_hour"]) == Decimal("3.6")
    (now,) = [hour for hour in chat["hours"] if hour["input_tokens"]]  # the hour it ran in
    assert now["input_tokens"] == completion.usage.prompt_tokens
    assert now["output_tokens"] == completion.usage.completion_tokens
    # Planned: $0.001 per second over 10,000 / 1,000 tokens per second.
    assert Decimal(now["planned_input_per_million"]) == Decimal("0.1")
    assert Decimal(now["planned_output_per_million"]) == Decimal("1")
    # Effective: the whole hour's $3.60 over the few tokens served, far above the plan.
    tokens = completion.usage.prompt_tokens + completion.usage.completion_tokens
    expected = (Decimal("3.6") * 1_000_000 / tokens).quantize(Decimal("0.000001"))
    assert Decimal(now["effective_per_million"]) == expected
    idle = [hour for hour in chat["hours"] if not hour["input_tokens"]]
    assert idle and idle[0]["effective_per_million"] is None  # an idle hour served nothing
    # The span prices exactly the hours asked for: two hours of $3.60, not three.
    assert chat["span"]["hours"] == 2 and Decimal(chat["span"]["gpu_cost"]) == Decimal("7.2")
