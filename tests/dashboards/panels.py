"""The dashboards' panels and queries, and Grafana's variables and macros filled in for a test."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards" / "grafana").glob("*.json"))
DATASOURCES = sorted((ROOT / "dashboards" / "provisioning" / "datasources").glob("*.yml"))
PROVIDERS = sorted((ROOT / "dashboards" / "provisioning" / "dashboards").glob("*.yml"))
RULES = ROOT / "dashboards" / "alerts" / "farebox.rules.yml"
RULE_TESTS = sorted((ROOT / "dashboards" / "alerts" / "tests").glob("*.test.yml"))

# Grafana's own variables; any other `$name` must be a template variable of the dashboard.
BUILT_IN = {
    "__range",
    "__rate_interval",
    "__interval",
    "__interval_ms",
    "__timeFilter",
    "__timeGroupAlias",
    "__timeFrom",
    "__timeTo",
}
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
SQL_MACRO = re.compile(r"\$__(timeFilter|timeGroupAlias|timeFrom|timeTo)\(([^)]*)\)")


# What two panels that read rollups and indexes by rank ask, answered the slow way: from
# the request rows, and by percentile_disc's sort (test_sql_panels_exact, sql_timing).
_PREFIX_ROWS = """
SELECT model_alias AS model, prefix_status AS reason, count(*) AS misses,
  coalesce(sum(prefix_lost_usd), 0) AS lost_usd
FROM requests
WHERE $__timeFilter(created_at) AND ('${team:regex}' = '.*' OR team ~ '^(${team:regex})$')
  AND ('${model:regex}' = '.*' OR model_alias ~ '^(${model:regex})$')
  AND ('${tier:regex}' = '.*' OR tier_served ~ '^(${tier:regex})$')
  AND prefix_status LIKE 'miss%'
GROUP BY 1, 2
"""
_TASK_SORT = """
SELECT coalesce(team, '') AS team, status AS outcome, count(*) AS tasks,
  percentile_disc(0.5) WITHIN GROUP (ORDER BY cost_total) AS p50_usd,
  percentile_disc(0.95) WITHIN GROUP (ORDER BY cost_total) AS p95_usd,
  max(cost_total) AS max_usd, sum(cost_total) AS total_usd
FROM tasks
WHERE finished_at IS NOT NULL AND $__timeFilter(finished_at)
  AND status NOT IN ('open', 'abandoned', 'untasked')
  AND ('${team:regex}' = '.*' OR coalesce(team, '') ~ '^(${team:regex})$')
GROUP BY 1, 2
ORDER BY total_usd DESC
"""
# The series panels' buckets from the rows: each request in its UTC hour, the hours that
# start in the range summed per point (a day or more apart over 31 days), as rollup_hourly.
_DAYS = (
    "($__interval_ms >= 86400000"
    " OR $__timeTo()::timestamptz - $__timeFrom()::timestamptz > interval '31 days')"
)
_STEP = (
    f"(CASE WHEN {_DAYS} THEN floor(greatest($__interval_ms, 86400000) / 86400000) * 86400"
    " ELSE $__interval_ms / 1000 END)"
)
_SERIES_ROWS = f"""
SELECT floor(extract(epoch from hour) / {_STEP}) * {_STEP} AS "time", metric,
  sum(cost_total) AS value
FROM (SELECT date_trunc('hour', created_at, 'UTC') AS hour, {{metric}} AS metric, cost_total
  FROM requests
  WHERE ('${{team:regex}}' = '.*' OR team ~ '^(${{team:regex}})$')
  AND ('${{model:regex}}' = '.*' OR model_alias ~ '^(${{model:regex}})$')
  AND ('${{tier:regex}}' = '.*' OR tier_served ~ '^(${{tier:regex}})$')) AS hours
WHERE hour BETWEEN $__timeFrom() AND $__timeTo()
GROUP BY 1, 2
ORDER BY 1
"""
SLOW_WAY = {
    "Prefix breaks: misses and money lost": _PREFIX_ROWS,
    "Cost per finished task by team and outcome": _TASK_SORT,
    "Spend over time by team": _SERIES_ROWS.replace("{metric}", "team"),
    "Spend over time by model, backend and tier": _SERIES_ROWS.replace(
        "{metric}", "model_alias || ' ' || backend || ' ' || tier_served"
    ),
}


@dataclass(frozen=True)
class Query:
    """One target of one panel."""

    dashboard: str
    panel: str
    ref: str
    kind: str  # datasource type: prometheus or postgres
    text: str

    @property
    def name(self) -> str:
        return f"{self.dashboard}: {self.panel} [{self.ref}]"


def load(path: Path) -> dict[str, Any]:
    """One dashboard's JSON."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def datasources() -> dict[str, str]:
    """uid -> type of every provisioned data source."""
    found: dict[str, str] = {}
    for path in DATASOURCES:
        for source in yaml.safe_load(path.read_text())["datasources"]:
            found[source["uid"]] = source["type"]
    return found


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those nested in collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries() -> list[Query]:
    """Every query target of every panel of every dashboard."""
    found = []
    for path in DASHBOARDS:
        board = load(path)
        for panel in panels(board):
            for target in panel.get("targets", []):
                kind = (target.get("datasource") or panel["datasource"])["type"]
                text = target["expr"] if kind == "prometheus" else target["rawSql"]
                found.append(Query(board["title"], panel["title"], target["refId"], kind, text))
    return found


def variables_used(text: str) -> set[str]:
    """The `$name` and `${name:format}` variables a query refers to."""
    return {a or b for a, b in VARIABLE.findall(text)}


def promql(text: str, chosen: dict[str, str]) -> str:
    """The PromQL with Grafana's intervals and the template variables filled in."""
    text = text.replace("$__rate_interval", "5m").replace("$__range", "15m")
    text = text.replace("$__interval", "15s")
    return VARIABLE.sub(lambda m: chosen[m.group(1) or m.group(2)], text)


def sql(
    text: str, chosen: dict[str, str], start: datetime, end: datetime, interval_s: int = 3600
) -> str:
    """The SQL with Grafana's PostgreSQL macros, `$__interval_ms` and the template variables
    filled in; `interval_s` is Grafana's interval (at least the series panels' 1 h minimum)."""

    def macro(match: re.Match[str]) -> str:
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",")]
        if name == "timeFilter":
            return f"{args[0]} BETWEEN '{start.isoformat()}' AND '{end.isoformat()}'"
        if name in ("timeFrom", "timeTo"):  # a quoted timestamp, as Grafana writes it
            return f"'{(start if name == 'timeFrom' else end).isoformat()}'"
        return f'floor(extract(epoch from {args[0]}) / {interval_s}) * {interval_s} AS "time"'

    text = SQL_MACRO.sub(macro, text).replace("$__interval_ms", str(interval_s * 1000))
    return VARIABLE.sub(lambda m: chosen[m.group(1) or m.group(2)], text)


def rules() -> list[dict[str, Any]]:
    """Every rule of the rule file (recording and alerting)."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


# A comparison with a number (`> 0.144`, `< 0.5`, `== 1`): what remains is the measured part.
THRESHOLD = re.compile(r"\s*(?:[<>]=?|==|!=)\s*(?:bool\s+)?[0-9.]+(?:e-?[0-9]+)?(?=\s|\)|$)")


def measured(expr: str) -> str:
    """An alert's expression without its threshold comparisons: the values it compares."""
    return THRESHOLD.sub("", expr)
