"""The dashboards' JSON and provisioning, and the alert rules under promtool (no gateway)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.dashboards import panels as p
from tests.dashboards.prometheus import promtool, require_tools


def test_both_dashboards_exist_with_unique_uids() -> None:
    names = {path.stem for path in p.DASHBOARDS}
    assert {"finance", "operations"} <= names
    uids = [p.load(path)["uid"] for path in p.DASHBOARDS]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", p.DASHBOARDS, ids=lambda path: path.stem)
def test_panel_ids_are_unique_and_panels_fit_the_grid(path: Path) -> None:
    board = p.load(path)
    every = list(p.panels(board))
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {path.name}"
    taken: set[tuple[int, int]] = set()
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                 for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] != "row":
            assert panel["targets"] and panel.get("description"), panel["title"]


@pytest.mark.parametrize("path", p.DASHBOARDS, ids=lambda path: path.stem)
def test_every_datasource_reference_is_provisioned(path: Path) -> None:
    sources = p.datasources()
    assert set(sources.values()) == {"prometheus", "postgres"}
    board = p.load(path)
    refs = [v["datasource"] for v in board["templating"]["list"]]
    for panel in p.panels(board):
        if panel["type"] == "row":
            continue
        refs.append(panel["datasource"])
        refs += [t["datasource"] for t in panel["targets"] if "datasource" in t]
    for ref in refs:
        assert sources.get(ref["uid"]) == ref["type"], f"{path.name}: unknown data source {ref}"


@pytest.mark.parametrize("path", p.DASHBOARDS, ids=lambda path: path.stem)
def test_template_variables_used_exist(path: Path) -> None:
    board = p.load(path)
    defined = {v["name"] for v in board["templating"]["list"]}
    assert {"team", "model", "tier"} <= defined
    used: set[str] = set()
    for query in p.queries():
        if query.dashboard == board["title"]:
            used |= p.variables_used(query.text)
    assert used - p.BUILT_IN <= defined, f"undefined variables: {used - p.BUILT_IN - defined}"
    assert defined <= used, f"variables no query uses: {defined - used}"


def test_the_dashboard_provider_is_a_file_provider() -> None:
    (path,) = p.PROVIDERS
    (provider,) = yaml.safe_load(path.read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_every_alert_has_a_unit_test() -> None:
    alerts = {rule["alert"] for rule in p.rules() if "alert" in rule}
    tested = set()
    for path in p.RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested |= {t["alertname"] for t in case.get("alert_rule_test", [])}
    assert alerts == tested
    assert {"FareboxTTFTBudgetBurnFast", "FareboxSpendSpike", "FareboxCacheHitRatioDrop",
            "FareboxTierFallingBack", "FareboxLedgerSpoolGrowing",
            "FareboxBudgetSoftLimit"} <= alerts  # fmt: skip


def test_promtool_checks_and_tests_the_rules() -> None:
    require_tools()
    checked = promtool("check", "rules", str(p.RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", *map(str, p.RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert tested.stdout.count("SUCCESS") == len(p.RULE_TESTS)
