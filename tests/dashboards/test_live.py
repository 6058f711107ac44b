"""Every dashboard query and every alert expression on real data: Prometheus scraping a
gateway under the workload of workload.py, and the gateway's PostgreSQL ledger."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from tests.dashboards import panels
from tests.dashboards.conftest import Live, fetch
from tests.dashboards.prometheus import has_data, values

ALL = {"team": ".*", "model": ".*", "tier": ".*"}  # each variable on "All"
ONE = {"team": "alpha", "model": "chat", "tier": "standard"}
PROMQL = [q for q in panels.queries() if q.kind == "prometheus"]
SQL = [q for q in panels.queries() if q.kind == "postgres"]
RULES = panels.rules()


def _rule_name(rule: dict[str, str]) -> str:
    return rule.get("record") or rule["alert"]


def _window() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now - timedelta(hours=1), now + timedelta(minutes=1)


@pytest.mark.parametrize("query", PROMQL, ids=lambda q: q.name)
def test_every_promql_panel_returns_data(live: Live, query: panels.Query) -> None:
    result = live.prometheus.query(panels.promql(query.text, ALL))
    assert has_data(result), f"{query.name} returned no finite value: {result}"


def test_promql_panels_run_for_one_team_model_and_tier(live: Live) -> None:
    for query in PROMQL:
        live.prometheus.query(panels.promql(query.text, ONE))  # raises on a PromQL error
    picked = panels.promql('sum(farebox_requests_total{model=~"$model",tier=~"$tier"})', ONE)
    # chat on standard, per round: a whole reply, a stream, a clamped one, the flex fallback.
    assert values(live.prometheus.query(picked)) == [8.0]


def test_template_variables_list_what_the_workload_used(live: Live) -> None:
    for name, metric in (("team", "farebox_task_cost_usd_count"), ("model", "farebox_requests_total"),
                         ("tier", "farebox_requests_total")):  # fmt: skip
        found = {s["metric"][name] for s in live.prometheus.query(f"group by ({name}) ({metric})")}
        expected = {"team": {"alpha", "beta", "gamma"}, "model": {"chat", "agent", "fragile"},
                    "tier": {"standard", "flex"}}[name]  # fmt: skip
        assert expected <= found, (name, found)


@pytest.mark.parametrize("rule", RULES, ids=_rule_name)
def test_every_rule_expression_returns_data(live: Live, rule: dict[str, str]) -> None:
    # An alert's values without its threshold: they exist even when nothing is wrong.
    expr = rule["expr"] if "record" in rule else panels.measured(rule["expr"])
    live.prometheus.wait_for(expr, has_data, timeout=10)
    live.prometheus.query(rule["expr"])  # the whole expression runs too


def test_prometheus_loaded_every_rule_and_the_soft_limit_fires(live: Live) -> None:
    loaded = live.prometheus.rules()
    assert {r["name"] for r in loaded} == {_rule_name(r) for r in RULES}
    live.prometheus.wait_for(
        'ALERTS{alertname="FareboxBudgetSoftLimit",alertstate="firing",scope_id="beta"}', bool
    )
    # 2 of chat's 10 calls fell back from flex: over 10%, pending for its 30 minutes.
    live.prometheus.wait_for(
        'ALERTS{alertname="FareboxTierFallingBack",model="chat",tier="flex"}', bool
    )
    assert all(r["health"] == "ok" for r in live.prometheus.rules()), loaded


def test_the_new_metrics_count_what_happened(live: Live) -> None:
    query = live.prometheus.query
    fallback = (
        'farebox_fallbacks_total{model="chat",tier="flex",to_model="chat",to_tier="standard"}'
    )
    assert values(query(fallback)) == [2.0]
    streams = values(query("sum(farebox_time_to_first_token_seconds_count)"))
    assert streams == [6.0]  # chat, thinker and capped, twice
    assert values(query("sum(farebox_backend_time_to_first_token_seconds_count)")) == streams
    assert values(query("sum(farebox_backend_time_to_first_answer_token_seconds_count)")) == [6.0]
    assert values(query('farebox_gpu_cost_per_hour_usd{model="chat"}')) == [3.6]
    closed = query('farebox_circuit_breaker_state{state="closed"}')
    assert len(closed) == 3 and set(values(closed)) == {1.0}  # sim-chat, sim-thinker, sglang
    assert values(query("farebox_http_requests_in_flight"))[0] >= 1  # the scrape itself
    assert values(query('sum(farebox_thinking_enforcement_total{enforcement="stream"})')) == [2.0]


@pytest.mark.parametrize("query", SQL, ids=lambda q: q.name)
def test_every_sql_panel_returns_rows(live: Live, query: panels.Query) -> None:
    start, end = _window()
    text = panels.sql(query.text, ALL, start, end)
    assert not re.search(r"\$[\w{]", text), text  # every variable and macro filled in
    rows = asyncio.run(fetch(live.database, text))
    assert rows and any(v is not None for v in rows[0].values()), f"{query.name}: {rows}"
    chosen = asyncio.run(fetch(live.database, panels.sql(query.text, ONE, start, end)))
    assert isinstance(chosen, list)


def test_sql_cost_per_task_sees_finished_tasks_only(live: Live) -> None:
    (query,) = [q for q in SQL if q.panel == "Cost per finished task by team and outcome"]
    start, end = _window()
    rows = asyncio.run(fetch(live.database, panels.sql(query.text, ALL, start, end)))
    outcomes = {(r["team"], r["outcome"]): r["tasks"] for r in rows}
    assert outcomes == {("alpha", "success"): 2, ("beta", "failed"): 2, ("gamma", "success"): 2}
    for row in rows:
        p50, p95, top, total = (
            Decimal(str(row[k])) for k in ("p50_usd", "p95_usd", "max_usd", "total_usd")
        )
        assert 0 < p50 <= p95 <= top <= total


def test_sql_prefix_break_panel_names_the_reason_and_the_money(live: Live) -> None:
    (query,) = [q for q in SQL if q.panel == "Prefix breaks: misses and money lost"]
    start, end = _window()
    rows = asyncio.run(fetch(live.database, panels.sql(query.text, ALL, start, end)))
    misses = {(r["model"], r["reason"]): r for r in rows}
    broken = misses[("agent", "miss:volatile_value")]  # the timestamp on top, once a round
    assert broken["misses"] == 2 and Decimal(str(broken["lost_usd"])) > 0
