"""Task outcomes through the gateway: a finished task, requests without a task id (untasked),
and what `/v1/spend/tasks`, `/v1/tasks/{id}` and `farebox report --json` say about them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal

import httpx
import pytest
from typer.testing import CliRunner

from gateway import cli
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.pg import fresh_pg_database, pg_url

MESSAGES = [{"role": "user", "content": "Summarise the incident in one line."}]


def _ask(gateway: Gateway, headers: dict[str, str]) -> httpx.Response:
    response = httpx.post(
        f"{gateway.base_url}/chat/completions",
        json={"model": "chat", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-client-key", "X-Farebox-Team": "ops", **headers},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def _cost(response: httpx.Response) -> Decimal:
    return Decimal(response.headers["x-farebox-cost-usd"])


@pytest.fixture
async def pg_ledger_url() -> AsyncIterator[str]:
    async with fresh_pg_database("farebox_outcomes") as name:
        yield pg_url(name)


def test_untasked_requests_are_their_own_line(gateway: Gateway) -> None:
    _untasked_apart(gateway)


@pytest.mark.postgres
def test_untasked_requests_are_their_own_line_on_postgresql(
    make_gateway: GatewayFactory, pg_ledger_url: str
) -> None:
    _untasked_apart(make_gateway(database_url=pg_ledger_url))


def _untasked_apart(gateway: Gateway) -> None:
    task = [
        _ask(gateway, {"X-Task-Id": "incident-7"}),
        _ask(gateway, {"X-Task-Id": "incident-7", "X-Task-Done": "true"}),
    ]
    loose = [_ask(gateway, {}) for _ in range(3)]
    implicit = "task-" + loose[0].headers["x-request-id"].removeprefix("req-")
    assert "x-task-id" not in loose[0].headers

    assert httpx.get(f"{gateway.base_url}/tasks/incident-7").json()["ended"] == "finished"
    untasked = httpx.get(f"{gateway.base_url}/tasks/{implicit}").json()
    assert (untasked["ended"], untasked["status"]) == ("untasked", "untasked")

    # The histogram behind the documented PromQL tells the two apart by `outcome`.
    metrics = httpx.get(f"{gateway.server.url}/metrics").text
    assert 'farebox_task_cost_usd_count{outcome="success",team="ops"} 1.0' in metrics
    assert 'farebox_task_cost_usd_count{outcome="untasked",team="ops"} 3.0' in metrics

    body = httpx.get(f"{gateway.base_url}/spend/tasks").json()
    assert body["tasks"] == ["finished"]
    (team,) = body["data"]
    # One finished task, not four "tasks" of which three are single calls.
    assert team["finished_tasks"] == 1
    assert Decimal(team["cost_p50"]) == sum(map(_cost, task))
    for share in ("output_share", "reasoning_share", "cache_write_share"):
        assert len(team[share].partition(".")[2]) <= 3  # a tenth of a percent, at most
    (outcomes,) = body["outcomes"]
    assert (outcomes["finished_tasks"], outcomes["abandoned_tasks"]) == (1, 0)
    assert outcomes["untasked_requests"] == 3
    assert Decimal(outcomes["untasked_cost"]) == sum(map(_cost, loose))

    csv = httpx.get(
        f"{gateway.base_url}/spend/tasks", params={"format": "csv", "table": "outcomes"}
    )
    assert csv.text.splitlines()[0].startswith("group,finished_tasks,finished_cost,abandoned")

    report = CliRunner().invoke(
        cli.app, ["report", "--database-url", gateway.settings.ledger_url(), "--json"]
    )
    assert report.exit_code == 0, report.output
    document = json.loads(report.output)
    assert document["tasks"][0]["finished_tasks"] == 1
    assert document["outcomes"][0]["untasked_requests"] == 3


def test_open_is_refused_as_a_status(gateway: Gateway) -> None:
    refused = httpx.get(f"{gateway.base_url}/spend/tasks", params={"status": "open"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "status"
    chosen = httpx.get(
        f"{gateway.base_url}/spend/tasks", params=[("status", "failed"), ("status", "abandoned")]
    )
    assert chosen.status_code == 200 and chosen.json()["tasks"] == ["failed", "abandoned"]
