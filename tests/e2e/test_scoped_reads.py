"""Scoped reads over real HTTP: two teams' traffic through the simulator with real virtual
keys; each team key reads its own team only (spend as JSON and CSV, task costs, one task,
GPU hours), a finance key and the admin key read both, another team's filter is a 403 and
another team's task a 404 no different from an unknown one."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Gateway, GatewayFactory
from tests.pg import fresh_pg_database, pg_url

ADMIN_KEY = "farebox-admin-scoped-reads-0123456789"
MESSAGES = [{"role": "user", "content": "Say something about the weather."}]
GROUP_TOTALS = ("request_count", "prompt_tokens", "completion_tokens", "cost_total")


@dataclass
class World:
    """A keyed gateway after alpha (2 calls, one task), beta (1 call, one task) and a
    teamless key (1 call) used it; keys by name."""

    gateway: Gateway
    keys: dict[str, str]

    def get(self, key: str, path: str, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys[key]}"}
        url = f"{self.gateway.server.url}{path}"
        return httpx.get(url, params=params, headers=headers, timeout=30)

    def ok(self, key: str, path: str, **params: Any) -> Any:
        response = self.get(key, path, **params)
        assert response.status_code == 200, response.text
        return response.json() if params.get("format") != "csv" else response.text


def make_key(gateway: Gateway, **attributes: Any) -> str:
    response = httpx.post(
        f"{gateway.server.url}/admin/keys",
        json=attributes,
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def chat(gateway: Gateway, key: str, task: str | None = None, done: bool = False) -> None:
    headers = {"X-Task-Id": task} if task else {}
    if done:
        headers["X-Task-Done"] = "true"  # the task finishes with this call's outcome
    gateway.sdk(api_key=key).chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=20,
        extra_headers=headers,
    )


@pytest.fixture
def world(make_gateway: GatewayFactory) -> World:
    return build_world(make_gateway)


def build_world(make_gateway: GatewayFactory, **settings: Any) -> World:
    gateway = make_gateway(admin_key=ADMIN_KEY, **settings)
    keys = {
        "admin": ADMIN_KEY,
        "alpha": make_key(gateway, team="alpha", project="web"),
        "beta": make_key(gateway, team="beta", project="api"),
        "finance": make_key(gateway, role="finance", name="books"),
        "solo": make_key(gateway, name="no team"),
    }
    chat(gateway, keys["alpha"], "alpha-run")
    chat(gateway, keys["alpha"], "alpha-run", done=True)
    chat(gateway, keys["beta"], "beta-run", done=True)
    chat(gateway, keys["solo"])
    return World(gateway, keys)


@pytest.fixture
async def pg_ledger_url() -> AsyncIterator[str]:
    async with fresh_pg_database("farebox_scoped") as name:
        yield pg_url(name)


def by_group(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["group"]: row for row in document["data"]}


def test_spend_shows_a_team_key_its_own_team(world: World) -> None:
    everyone = by_group(world.ok("finance", "/v1/spend"))
    assert everyone == by_group(world.ok("admin", "/v1/spend"))
    assert {"alpha", "beta"} <= set(everyone) and len(everyone) == 3  # and the teamless key's
    assert everyone["alpha"]["request_count"] == 2 and everyone["beta"]["request_count"] == 1
    assert by_group(world.ok("alpha", "/v1/spend")) == {"alpha": everyone["alpha"]}
    assert by_group(world.ok("beta", "/v1/spend")) == {"beta": everyone["beta"]}
    # by model: the team's own calls only
    alpha_models = world.ok("alpha", "/v1/spend", group_by="model")["data"]
    assert [(r["group"], r["cost_total"]) for r in alpha_models] == [
        ("chat", everyone["alpha"]["cost_total"])
    ]
    # the teamless key sees the one request it made itself
    [solo] = world.ok("solo", "/v1/spend")["data"]
    assert solo["request_count"] == 1 and solo["group"] not in ("alpha", "beta")
    assert everyone[solo["group"]] == solo


def test_csv_shows_a_team_key_its_own_team(world: World) -> None:
    text = world.ok("alpha", "/v1/spend", format="csv")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [row["group"] for row in rows] == ["alpha"]
    alpha = by_group(world.ok("finance", "/v1/spend"))["alpha"]
    assert {name: Decimal(rows[0][name]) for name in GROUP_TOTALS} == {
        name: Decimal(alpha[name]) for name in GROUP_TOTALS
    }
    finance_csv = world.ok("finance", "/v1/spend", format="csv")
    assert {row["group"] for row in csv.DictReader(io.StringIO(finance_csv, newline=""))} >= {
        "alpha",
        "beta",
    }


def test_task_costs_and_outcomes_are_scoped(world: World) -> None:
    alpha = world.ok("alpha", "/v1/spend/tasks")
    assert [(r["group"], r["finished_tasks"]) for r in alpha["data"]] == [("alpha", 1)]
    assert [r["group"] for r in alpha["outcomes"]] == ["alpha"]
    everyone = world.ok("finance", "/v1/spend/tasks")
    assert {r["group"] for r in everyone["data"]} == {"alpha", "beta"}
    assert [r for r in everyone["data"] if r["group"] == "alpha"] == alpha["data"]
    outcomes_csv = world.ok("beta", "/v1/spend/tasks", format="csv", table="outcomes")
    assert [line.split(",")[0] for line in outcomes_csv.splitlines()[1:]] == ["beta"]


def test_another_teams_task_is_a_404_like_a_missing_one(world: World) -> None:
    mine = world.ok("alpha", "/v1/tasks/alpha-run")
    assert mine["team"] == "alpha" and len(mine["requests"]) == 2
    assert world.ok("finance", "/v1/tasks/beta-run")["team"] == "beta"
    assert world.ok("admin", "/v1/tasks/alpha-run") == mine
    hidden = world.get("beta", "/v1/tasks/alpha-run")
    missing = world.get("beta", "/v1/tasks/alpha-walk")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"] == {
        **missing.json()["error"],
        "message": missing.json()["error"]["message"].replace("alpha-walk", "alpha-run"),
    }
    assert world.get("solo", "/v1/tasks/alpha-run").status_code == 404


def test_another_teams_filter_is_a_403_naming_it(world: World) -> None:
    for path in ("/v1/spend", "/v1/spend/tasks"):
        response = world.get("alpha", path, team="beta")
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["type"] == "permission_error" and error["param"] == "team"
        assert error["code"] == "team_not_allowed" and "beta" not in str(world.ok("alpha", path))
    own = world.ok("alpha", "/v1/spend", team="alpha")
    assert [r["group"] for r in own["data"]] == ["alpha"]
    assert world.ok("alpha", "/v1/spend", project="api")["data"] == []  # beta's project
    assert world.ok("solo", "/v1/spend", team="alpha")["data"] == []  # narrows its own rows


def test_finance_filters_by_team_and_project(world: World) -> None:
    beta = world.ok("finance", "/v1/spend", team="beta", group_by="project")
    assert [(r["group"], r["request_count"]) for r in beta["data"]] == [("api", 1)]
    web = world.ok("finance", "/v1/spend/tasks", project="web")
    assert [r["group"] for r in web["data"]] == ["alpha"]
    bad = world.get("finance", "/v1/spend", team="a\tb")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "team"


def _gpu_tokens(document: dict[str, Any]) -> tuple[int, int]:
    [chat_model] = [m for m in document["data"] if m["model"] == "chat"]
    hours = chat_model["hours"]
    return sum(h["input_tokens"] for h in hours), sum(h["output_tokens"] for h in hours)


def test_gpu_hours_count_the_teams_own_tokens(world: World) -> None:
    spent = {
        key: by_group(world.ok(key, "/v1/spend", group_by="model"))["chat"]
        for key in ("alpha", "beta", "finance")
    }
    for key, row in spent.items():
        expected = (row["prompt_tokens"] - row["cached_tokens"], row["completion_tokens"])
        assert _gpu_tokens(world.ok(key, "/v1/gpu", hours=2)) == expected
    alpha, beta, everyone = (_gpu_tokens(world.ok(k, "/v1/gpu")) for k in spent)
    assert 0 < alpha[1] < everyone[1] and alpha[1] + beta[1] < everyone[1]  # + the solo call


FORMULAS = ['=HYPERLINK("http://x","y")', "+1", "@SUM(1)", "-2"]


def test_csv_export_defuses_formula_team_names(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(admin_key=ADMIN_KEY)
    keys = {"finance": make_key(gateway, role="finance")}
    for team in FORMULAS:
        keys[team] = make_key(gateway, team=team)
        chat(gateway, keys[team])
    world = World(gateway, keys)
    text = world.ok("finance", "/v1/spend", format="csv")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert sorted(row["group"] for row in rows) == sorted(f"'{team}" for team in FORMULAS)
    assert all(Decimal(row["cost_total"]) > 0 for row in rows)  # numbers stay numbers
    # JSON is data, not a spreadsheet: the names come back as they are
    assert {r["group"] for r in world.ok("finance", "/v1/spend")["data"]} == set(FORMULAS)
    # a team key's own CSV is defused too
    own = world.ok("+1", "/v1/spend/tasks", format="csv", table="outcomes")
    assert own.splitlines()[1].startswith("'+1,")


@pytest.mark.postgres
def test_the_same_scoping_on_postgresql(make_gateway: GatewayFactory, pg_ledger_url: str) -> None:
    world = build_world(make_gateway, database_url=pg_ledger_url)
    test_spend_shows_a_team_key_its_own_team(world)
    test_task_costs_and_outcomes_are_scoped(world)
    test_another_teams_task_is_a_404_like_a_missing_one(world)
    test_another_teams_filter_is_a_403_naming_it(world)
    test_gpu_hours_count_the_teams_own_tokens(world)
