"""The cost explorer page in headless Chromium (Debian's `chromium`, installed by
`.ci/chromium`), after the workload of tests/e2e/explorer_workload.py: each view loads,
every panel draws rows from the JSON (no panel reports an error), the numbers on the page
are the API's, the task drill-down shows each call's tokens, cached share, TTFT and cost
as the ledger has them, and a team key's page shows its own team only."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser

import httpx
import pytest

from tests.e2e.explorer_browser import CHROMIUM, Browser
from tests.e2e.explorer_workload import Workload, world
from tests.servers import ServerThread

D = Decimal
OVERVIEW = ("spend", "breakdown", "cache", "gpu")


@dataclass
class Row:
    attrs: dict[str, str]
    fields: dict[str, str] = field(default_factory=dict)  # data-field -> data-value
    text: list[str] = field(default_factory=list)


class Page(HTMLParser):
    """What a test reads off the rendered DOM: body and panel attributes, table rows."""

    def __init__(self) -> None:
        super().__init__()
        self.body: dict[str, str] = {}
        self.panels: dict[str, dict[str, str]] = {}
        self.rows: dict[str, list[Row]] = {}  # by panel
        self._panel: str | None = None
        self._row: Row | None = None

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        attrs = {name: value or "" for name, value in attributes}
        if tag == "body":
            self.body = attrs
        elif tag == "section" and "data-panel" in attrs:
            self._panel = attrs["data-panel"]
            self.panels[self._panel] = attrs
        elif tag == "tr" and self._panel is not None:
            self._row = Row(attrs)
            self.rows.setdefault(self._panel, []).append(self._row)
        elif tag == "span" and self._row is not None and "data-field" in attrs:
            self._row.fields[attrs["data-field"]] = attrs.get("data-value", "")

    def handle_data(self, data: str) -> None:
        if self._row is not None and data.strip():
            self._row.text.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None
        elif tag == "section":
            self._panel = None

    def data_rows(self, panel: str) -> list[Row]:
        """The rows the page drew from data (not headers, not the chart's legend)."""
        return [r for r in self.rows.get(panel, []) if any(a.startswith("data-") for a in r.attrs)]


@pytest.fixture(scope="module")
def work(sim_server: ServerThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    if shutil.which(CHROMIUM) is None:
        message = f"{CHROMIUM} is missing: run .ci/chromium (make test does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    httpx.post(f"{sim_server.url}/sim/reset").raise_for_status()
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)  # the module's gateway outlives the per-test scrub
        with world(sim_server.url, tmp_path_factory.mktemp("explorer-page")) as done:
            yield done


@pytest.fixture(scope="module")
def pages(work: Workload) -> dict[str, Page]:
    """Each view, rendered once, in one browser."""
    admin, alpha = work.keys["admin"], work.keys["alpha"]
    today = datetime.now(UTC).date()  # a from/to window of whole days holds the workload
    yesterday = today - timedelta(days=1)
    urls = {
        "overview": f"{work.url}/ui?view=overview#key={admin}",
        "tasks": f"{work.url}/ui?view=tasks&from={yesterday}&to={today}#key={admin}",
        "task": f"{work.url}/ui?view=task&task=alpha-release#key={admin}",
        "alpha": f"{work.url}/ui?view=overview&range=7d&by=team#key={alpha}",  # by day
        "no key": f"{work.url}/ui?view=overview",
    }
    rendered = {}
    with Browser() as browser:
        for name, url in urls.items():
            rendered[name] = Page()
            rendered[name].feed(browser.dom(url))
    return rendered


def _complete(page: Page, panels: tuple[str, ...]) -> None:
    assert page.body.get("data-ready") == "true", page.body
    for name in panels:
        panel = page.panels[name]
        assert "data-error" not in panel, (name, panel.get("data-error"))
        assert int(panel.get("data-rows", "0")) > 0, (name, panel)


def test_the_overview_draws_every_panel_with_the_apis_numbers(
    work: Workload, pages: dict[str, Page]
) -> None:
    page = pages["overview"]
    _complete(page, OVERVIEW)
    spend = work.get("admin", "/v1/explorer/spend", by="team")
    shown = {row.attrs["data-group"]: row.fields["cost_total"] for row in page.data_rows("spend")}
    assert shown == {g["group"]: g["cost_total"] for g in spend["groups"]} and len(shown) == 2
    breakdown = work.get("admin", "/v1/explorer/breakdown")
    components = {r.attrs["data-component"]: r.fields for r in page.data_rows("breakdown")}
    assert {name: fields[f"cost_{name}"] for name, fields in components.items()} == {
        name: value for name, value in breakdown["cost"].items() if name != "total"
    }
    assert D(breakdown["output_and_reasoning_share"]) > 0
    cache = work.get("admin", "/v1/explorer/cache")
    saved = {r.attrs["data-model"]: r.fields["saved_usd"] for r in page.data_rows("cache")
             if "data-model" in r.attrs}  # fmt: skip
    assert saved == {m["model"]: m["saved_usd"] for m in cache["by_model"]}
    breaks = [r.attrs["data-reason"] for r in page.data_rows("cache") if "data-reason" in r.attrs]
    assert breaks == [b["reason"] for b in cache["breaks"]] and "volatile_value" in breaks
    [gpu] = page.data_rows("gpu")
    assert gpu.attrs["data-model"] == "chat" and int(gpu.fields["tokens"]) > 0
    assert page.panels["gpu"]["data-rows"] == "1"


def test_the_tasks_view_shows_costs_by_outcome_and_the_top_tasks(
    work: Workload, pages: dict[str, Page]
) -> None:
    page = pages["tasks"]
    _complete(page, ("outcomes", "top-tasks"))
    document = work.get("admin", "/v1/explorer/tasks", limit=20)
    shown = [
        (r.attrs["data-team"], r.attrs["data-outcome"], r.fields["cost_p50"], r.fields["cost_p95"],
         r.fields["cost_max"])
        for r in page.data_rows("outcomes")
    ]  # fmt: skip
    assert shown == [
        (o["team"], o["outcome"], o["cost_p50"], o["cost_p95"], o["cost_max"])
        for o in document["outcomes"]
    ]
    assert [
        (r.attrs["data-task-id"], r.fields["cost_total"]) for r in page.data_rows("top-tasks")
    ] == [(t["task_id"], t["cost_total"]) for t in document["top"]]


def test_the_drill_down_shows_each_call_as_the_ledger_has_it(
    work: Workload, pages: dict[str, Page]
) -> None:
    page = pages["task"]
    _complete(page, ("task-summary", "task-calls"))
    task = work.get("admin", "/v1/tasks/alpha-release")
    [summary] = page.data_rows("task-summary")
    assert summary.fields["cost_total"] == task["cost"]["total"]
    assert summary.fields["cost_reasoning"] == task["cost"]["reasoning"] != "0"
    calls = page.data_rows("task-calls")
    assert len(calls) == len(task["requests"]) == 4
    for shown, row in zip(calls, task["requests"], strict=True):
        assert shown.attrs["data-request-id"] == row["request_id"]
        names = ("prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens",
                 "reasoning_tokens", "cost_total")  # fmt: skip
        assert {name: shown.fields[name] for name in names} == {
            name: str(row[name]) for name in names
        }
        assert shown.fields["ttft_ms"] == ("" if row["ttft_ms"] is None else str(row["ttft_ms"]))
        share = f"{row['cached_tokens'] / row['prompt_tokens']:.3f}"
        assert shown.fields["cached_share"] == share
        assert row["task_step"] in shown.text and row["step_kind"] in shown.text
        assert row["model_alias"] in shown.text and row["tier_served"] in shown.text
    assert calls[0].fields["ttft_ms"] != ""  # the streamed call has its TTFT
    assert int(calls[0].fields["reasoning_tokens"]) > 0
    assert float(calls[3].fields["cached_share"]) > 0.5  # the prefix read back from the cache


def test_a_team_key_sees_its_own_team_on_the_page(pages: dict[str, Page]) -> None:
    page = pages["alpha"]
    _complete(page, OVERVIEW)
    assert [row.attrs["data-group"] for row in page.data_rows("spend")] == ["alpha"]
    models = {r.attrs["data-model"] for r in page.data_rows("cache") if "data-model" in r.attrs}
    assert "chat" not in models  # beta's GPU route


def test_without_a_key_every_panel_says_why_it_is_empty(pages: dict[str, Page]) -> None:
    page = pages["no key"]
    assert page.body.get("data-ready") == "true"
    for name in OVERVIEW:
        assert page.panels[name].get("data-error", "").startswith("401"), page.panels[name]
        assert page.panels[name]["data-rows"] == "0"
