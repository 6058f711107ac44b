"""The cost explorer's JSON over real HTTP, after a known workload through the simulator
(tests/e2e/explorer_workload.py), on SQLite and PostgreSQL: every number equals what the
ledger's own request rows (`/v1/tasks/{id}`) and the price book (`/v1/cost/estimate`)
say, and a team key reads its own team only."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from gateway.ledger.queries import percentile
from tests.e2e.explorer_workload import TASKS, Workload, world
from tests.pg import PG_ADMIN_DB, PG_HOST, PG_PORT, PG_USER, pg_url, require_postgres
from tests.servers import ServerThread

D = Decimal
FIELDS = {"team": "team", "project": "project", "model": "model_alias", "backend": "backend",
          "tier": "tier_served"}  # fmt: skip
COMPONENTS = ("input", "cached", "cache_write", "output", "reasoning", "total")


async def _admin(statement: str) -> None:
    try:
        connection = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=5
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require_postgres(f"{type(exc).__name__}: {exc}")
        raise
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database of this module's own (the module shares one gateway)."""
    name = f"farebox_explorer_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield pg_url(name)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def work(
    request: pytest.FixtureRequest,
    sim_server: ServerThread,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Workload]:
    """One keyed gateway per database, after the workload, shared by the module's tests."""
    url = request.getfixturevalue("pg_database") if request.param == "postgresql" else None
    httpx.post(f"{sim_server.url}/sim/reset").raise_for_status()
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)  # the module's gateway outlives the per-test scrub
        with world(sim_server.url, tmp_path_factory.mktemp("explorer"), url) as done:
            yield done


def rows(work: Workload) -> list[dict[str, Any]]:
    """Every request row of the workload, as the ledger's task read returns them."""
    found: list[dict[str, Any]] = []
    for task in TASKS:
        found += work.get("admin", f"/v1/tasks/{task}")["requests"]
    return found


def hour_of(created_at: str) -> str:
    return datetime.fromisoformat(created_at).replace(minute=0, second=0, microsecond=0).isoformat()


def share(part: Decimal, whole: Decimal) -> Decimal:
    return (part / whole).quantize(D("0.001"), rounding=ROUND_HALF_EVEN) if whole else D(0)


def test_spend_over_time_per_dimension_equals_the_rows(work: Workload) -> None:
    every = rows(work)
    assert len(every) == 10
    for by, field in FIELDS.items():
        expected: dict[tuple[str, str], list[Any]] = {}
        for row in every:
            line = expected.setdefault((hour_of(row["created_at"]), row[field]), [0, D(0)])
            line[0] += 1
            line[1] += D(row["cost_total"])
        document = work.get("admin", "/v1/explorer/spend", by=by, bucket="hour")
        got = {(p["start"], p["group"]): [p["request_count"], D(p["cost_total"])]
               for p in document["data"]}  # fmt: skip
        assert got == expected, by
        totals = [D(g["cost_total"]) for g in document["groups"]]
        assert totals == sorted(totals, reverse=True) and sum(totals) == sum(
            D(r["cost_total"]) for r in every
        )


def test_where_the_money_went_equals_the_rows(work: Workload) -> None:
    every = rows(work)
    document = work.get("admin", "/v1/explorer/breakdown")
    cost = {name: sum((D(r[f"cost_{name}"]) for r in every), D(0)) for name in COMPONENTS}
    assert {name: D(value) for name, value in document["cost"].items()} == cost
    assert document["request_count"] == len(every)
    assert document["tokens"]["reasoning_tokens"] == sum(r["reasoning_tokens"] for r in every) > 0
    assert D(document["output_share"]) == share(cost["output"], cost["total"])
    assert D(document["reasoning_share"]) == share(cost["reasoning"], cost["total"]) > 0
    both = share(cost["output"] + cost["reasoning"], cost["total"])
    assert D(document["output_and_reasoning_share"]) == both


def _estimate(work: Workload, model: str, tokens: int, cached: int) -> Decimal:
    body = {"model": model, "input_tokens": tokens, "cached_tokens": cached}
    response = httpx.post(f"{work.url}/v1/cost/estimate", json=body, headers=work.headers("admin"))
    assert response.status_code == 200, response.text
    return D(response.json()["total"])


def test_cache_money_saved_and_lost_equals_rows_and_prices(work: Workload) -> None:
    every = rows(work)
    document = work.get("admin", "/v1/explorer/cache")
    saved = D(0)
    for line in document["by_model"]:
        mine = [r for r in every if (r["model_alias"], r["tier_served"]) ==
                (line["model"], line["tier"])]  # fmt: skip
        cached = sum(r["cached_tokens"] for r in mine)
        assert (line["requests"], line["cached_tokens"]) == (len(mine), cached)
        assert D(line["cost_cached"]) == sum((D(r["cost_cached"]) for r in mine), D(0))
        expected = _estimate(work, line["model"], cached, 0) - _estimate(
            work, line["model"], cached, cached
        )
        assert D(line["saved_usd"]) == expected
        saved += expected
    assert D(document["saved_usd"]) == saved > 0 and document["unpriced"] == []
    lost = sum((D(r["prefix_lost_usd"]) for r in every if r["prefix_lost_usd"]), D(0))
    assert D(document["lost_usd"]) == lost > 0
    broken = [r for r in every if ":" in (r["prefix_status"] or "")]
    reasons = {r["prefix_status"].split(":", 1)[1] for r in broken}
    assert {b["reason"] for b in document["breaks"]} == reasons and "volatile_value" in reasons
    [volatile] = [b for b in document["breaks"] if b["reason"] == "volatile_value"]
    [row] = [r for r in broken if r["prefix_status"] == "miss:volatile_value"]
    assert (volatile["requests"], D(volatile["lost_usd"])) == (1, D(row["prefix_lost_usd"]))
    assert volatile["expected_cached_tokens"] == row["expected_cached_tokens"] > 0


def test_task_costs_by_team_and_outcome_and_the_top_tasks(work: Workload) -> None:
    tasks = {task: work.get("admin", f"/v1/tasks/{task}") for task in TASKS}
    document = work.get("admin", "/v1/explorer/tasks")
    groups: dict[tuple[str, str], list[Decimal]] = {}
    for task, (_, outcome) in TASKS.items():
        if outcome is not None:
            groups.setdefault((tasks[task]["team"], outcome), []).append(
                D(tasks[task]["cost"]["total"])
            )
    expected = []
    for (team, outcome), costs in sorted(groups.items()):
        costs.sort()
        expected.append(
            {
                "team": team,
                "outcome": outcome,
                "tasks": len(costs),
                "cost_total": sum(costs),
                "cost_p50": percentile(costs, 50),
                "cost_p95": percentile(costs, 95),
                "cost_max": costs[-1],
            }
        )
    got = [{k: D(v) if k.startswith("cost") else v for k, v in o.items()}
           for o in document["outcomes"]]  # fmt: skip
    assert got == expected
    by_cost = sorted(tasks, key=lambda t: (-D(tasks[t]["cost"]["total"]), t))
    assert [t["task_id"] for t in document["top"]] == by_cost  # the open one included
    for top in document["top"]:
        task = tasks[top["task_id"]]
        assert (top["status"], top["request_count"]) == (task["status"], task["request_count"])
        assert D(top["cost_total"]) == D(task["cost"]["total"])
    assert [t["task_id"] for t in work.get("admin", "/v1/explorer/tasks", limit=1)["top"]] == [
        by_cost[0]
    ]


def test_gpu_route_planned_against_effective(work: Workload) -> None:
    chat = [r for r in rows(work) if r["model_alias"] == "chat"]
    [model] = work.get("admin", "/v1/explorer/gpu")["data"]
    assert model["model"] == "chat" and len(model["hours"]) == 24
    tokens_in = sum(r["prompt_tokens"] - r["cached_tokens"] for r in chat)
    tokens_out = sum(r["completion_tokens"] for r in chat)
    span = model["span"]
    assert (span["input_tokens"], span["output_tokens"]) == (tokens_in, tokens_out)
    assert D(span["gpu_cost"]) == D("3.60") * 24 and span["hours"] == 24
    per_million = (D("86.4") * 1_000_000 / (tokens_in + tokens_out)).quantize(D("0.000001"))
    assert D(span["effective_per_million"]) == per_million
    # planned: $3.60/h at 10,000 input and 1,000 output tokens a second
    assert D(model["planned_input_per_million"]) == D("0.1")
    assert D(model["planned_output_per_million"]) == D("1")
    assert sum(h["input_tokens"] for h in model["hours"]) == tokens_in
    assert work.get("admin", "/v1/explorer/gpu", model="gpt")["data"] == []


def test_a_team_key_sees_its_own_team(work: Workload) -> None:
    spend = work.get("alpha", "/v1/explorer/spend", by="team")
    assert [g["group"] for g in spend["groups"]] == ["alpha"]
    everyone = work.get("finance", "/v1/explorer/spend", by="team")
    assert {g["group"] for g in everyone["groups"]} == {"alpha", "beta"}
    assert spend["groups"][0] == next(g for g in everyone["groups"] if g["group"] == "alpha")
    tasks = work.get("alpha", "/v1/explorer/tasks")
    assert {o["team"] for o in tasks["outcomes"]} == {t["team"] for t in tasks["top"]} == {"alpha"}
    beta_models = {r["model_alias"] for r in rows(work) if r["team"] == "beta"}
    alpha_cache = work.get("alpha", "/v1/explorer/cache")
    assert "chat" in beta_models and "chat" not in {m["model"] for m in alpha_cache["by_model"]}
    alpha_rows = [r for r in rows(work) if r["team"] == "alpha"]
    breakdown = work.get("alpha", "/v1/explorer/breakdown")
    assert D(breakdown["cost"]["total"]) == sum((D(r["cost_total"]) for r in alpha_rows), D(0))
    assert work.get("beta", "/v1/explorer/gpu")["data"][0]["span"]["input_tokens"] > 0
    assert work.get("alpha", "/v1/explorer/gpu")["data"][0]["span"]["input_tokens"] == 0
    for path in ("spend", "breakdown", "cache", "tasks", "gpu"):
        response = httpx.get(
            f"{work.url}/v1/explorer/{path}", params={"team": "beta"}, headers=work.headers("alpha")
        )
        assert response.status_code == 403, path
        assert response.json()["error"]["param"] == "team"


def test_filters_narrow_by_project_model_and_time(work: Workload) -> None:
    thinker = work.get("finance", "/v1/explorer/spend", by="model", model="thinker")
    assert [g["group"] for g in thinker["groups"]] == ["thinker"]
    api = work.get("finance", "/v1/explorer/spend", by="project", project="api")
    assert [g["group"] for g in api["groups"]] == ["api"]
    later = max(r["created_at"] for r in rows(work))
    after = work.get("finance", "/v1/explorer/breakdown", since=later.replace("+00:00", "Z"))
    assert after["request_count"] == 1
    nothing = work.get("finance", "/v1/explorer/tasks", model="nothing")
    assert nothing == {"object": "explorer.tasks", "outcomes": [], "top": []}


@pytest.mark.parametrize(
    ("path", "params", "param"),
    [
        ("spend", {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ("gpu", {"since": "2020-01-01T00:00:00Z"}, "since"),
        ("gpu", {"since": "2999-01-01T00:00:00Z"}, "since"),
        ("spend", {"bucket": "week"}, "bucket"),
        ("spend", {"by": "step"}, "by"),
        ("tasks", {"limit": "0"}, "limit"),
        ("cache", {"model": "a\tb"}, "model"),
    ],
)
def test_bad_filters_are_a_400_naming_them(
    work: Workload, path: str, params: dict[str, str], param: str
) -> None:
    response = httpx.get(
        f"{work.url}/v1/explorer/{path}", params=params, headers=work.headers("admin")
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_extreme_windows_and_odd_names_answer_normally(work: Workload) -> None:
    wide = {"since": "0001-01-01T00:00:00", "until": "9999-12-31T23:59:59+00:00"}
    total = work.get("admin", "/v1/explorer/breakdown")["cost"]["total"]
    assert work.get("admin", "/v1/explorer/breakdown", **wide)["cost"]["total"] == total
    for path in ("spend", "cache", "tasks"):
        assert work.get("admin", f"/v1/explorer/{path}", **wide)["object"] == f"explorer.{path}"
    odd = {"team": "O'Brien %_", "project": "日本", "model": "a'b;--"}
    assert work.get("admin", "/v1/explorer/spend", **odd)["data"] == []
    assert work.get("admin", "/v1/explorer/tasks", **odd)["top"] == []


def test_the_page_and_its_assets_need_no_key_and_hold_no_data(work: Workload) -> None:
    page = httpx.get(f"{work.url}/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert "alpha" not in page.text
    assert httpx.get(f"{work.url}/ui/").text == page.text
    for asset, kind in (("app.js", "text/javascript"), ("app.css", "text/css"),
                        ("vendor/uplot.iife.min.js", "text/javascript")):  # fmt: skip
        response = httpx.get(f"{work.url}/ui/{asset}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert asset.split("/")[-1].split(".")[0].lower() in page.text.lower()
    for missing in ("routes.py", "..%2Fapp.py", "vendor%2F..%2F__init__.py", "index.html.bak"):
        assert httpx.get(f"{work.url}/ui/{missing}").status_code == 404, missing
    # the data stays behind a key
    assert httpx.get(f"{work.url}/v1/explorer/spend").status_code == 401


def test_static_files_ship_in_the_package() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["gateway"]
    static = Path(__file__).resolve().parents[2] / "gateway" / "ui" / "static"
    for path in static.rglob("*"):
        if path.is_file():
            relative = path.relative_to(static.parents[1])
            assert any(relative.match(p) for p in patterns), f"{relative} is not package data"
