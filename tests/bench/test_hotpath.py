"""The hot-path benchmark runs end to end in its tiny mode and fills every row.

One run (a few hundred requests; no LiteLLM, whose venv `make bench` builds) against the
real mock upstream, minproxy.py, `farebox serve` on SQLite and on PostgreSQL + Redis. The
numbers are read by people, not judged here: the test checks they were measured and make
sense (CPU counted, connections counted, latencies numbers), not that targets are met.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pg import fresh_pg_database, pg_url

BENCH = Path(__file__).resolve().parents[2] / "bench" / "hotpath.py"
GATEWAYS = ("farebox-sqlite", "farebox-pg-redis")
SKIPPED_BY_FLAG = ("LiteLLM",)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    folder = tmp_path_factory.mktemp("hotpath")
    results, data = folder / "RESULTS.md", folder / "results.json"
    command = [sys.executable, str(BENCH), "--tiny", "--no-litellm", "--results", str(results)]
    command += ["--json-out", str(data)]
    done = asyncio.run(_in_fresh_database(command))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(data.read_text()), results.read_text()


async def _in_fresh_database(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the bench with its PostgreSQL ledger in a database of its own."""
    async with fresh_pg_database("farebox_hotpath") as name:
        return await asyncio.to_thread(
            subprocess.run,
            [*command, "--postgres-url", pg_url(name)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )


def test_every_target_row_has_a_measured_value_and_a_verdict(
    tiny: tuple[dict[str, Any], str],
) -> None:
    report, markdown = tiny
    goals = report["goals"]
    assert len(goals) == 22  # the targets, each streamed and whole where it says so
    for goal in goals:
        row = f"| {goal['name']} | {goal['goal']} | {goal['measured']} | {goal['verdict']} |"
        assert row in markdown
        if any(word in goal["name"] for word in SKIPPED_BY_FLAG):
            assert goal["measured"] == "not measured (--no-litellm)"
        elif goal["name"].startswith("2 workers"):
            assert goal["verdict"].startswith(("not available", "not run in --tiny"))
        else:
            assert goal["verdict"] == "met" or goal["verdict"].startswith("missed by"), goal
            # A number: an added latency can fall below zero in a short run (noise).
            assert re.match(r"-?\d", goal["measured"]), goal


def test_gateways_cost_cpu_and_their_upstream_connections_are_counted(
    tiny: tuple[dict[str, Any], str],
) -> None:
    report, _ = tiny
    runs = report["runs"]
    assert set(runs) == {"direct", "minproxy", *GATEWAYS}
    for target, scenarios in runs.items():
        for key, run in scenarios.items():
            # Failed requests are reported (RESULTS.md's errors column), not hidden; on this
            # loaded box a gateway has cut a few streams under c=64, which is the gateway's
            # to fix, not a broken benchmark.
            failed = sum(run["errors"].values())
            assert run["completed"] > 0 and failed <= run["sent"] // 4, (target, key, run)
            assert 0 < run["p50_ms"] <= run["p99_ms"], (target, key, run)
            if key.startswith("sse"):
                assert 0 < run["ttft_p50_ms"] <= run["p50_ms"] + 1e-6, (target, key, run)
            if target == "direct":
                assert run["cpu_ms_per_request"] is None  # nothing between loadgen and the mock
                continue
            # A request costs CPU (10 ms ticks over a few hundred requests: never 0 in total)
            # and at most one new upstream connection.
            assert 0 <= run["cpu_ms_per_request"] < 1000, (target, key, run)
            assert 0 <= run["upstream_opens"] <= run["sent"], (target, key, run)
    for gateway in GATEWAYS:
        tree = runs[gateway].values()
        assert sum(run["cpu_ms_per_request"] for run in tree) > 0
        assert sum(run["upstream_opens"] for run in tree) >= 1  # the first connection counts
        assert report["ready_s"][gateway] > 0
        assert 20 < report["rss_mib"][gateway] < 4096
    # The PostgreSQL ledger's backends are read in its rows (10 ms ticks: maybe 0 here),
    # and only there.
    assert all(run["postgres_cpu_ms_per_request"] is not None for run in runs[GATEWAYS[1]].values())
    assert all(run["postgres_cpu_ms_per_request"] is None for run in runs[GATEWAYS[0]].values())
    assert set(runs["farebox-sqlite"]) == {
        "json-c1",
        "sse-c1",
        "json-c64",
        "sse-c64",
        "agent-1mb",
        "fresh-1mb",
    }


def test_the_results_file_says_where_and_with_what_it_ran(tiny: tuple[dict[str, Any], str]) -> None:
    report, markdown = tiny
    for line in (
        "- cpu: ",
        "- cores: ",
        "- python: ",
        "- farebox commit: ",
        "- uvloop: ",
        "- httptools: ",
        "- litellm proxy (bench venv): ",
    ):
        assert line in markdown
    assert "taskset -c 1" in report["launches"]["farebox-sqlite"]
    assert "FAREBOX_DATABASE_URL=postgresql+asyncpg://" in report["launches"]["farebox-pg-redis"]
    assert len(report["loadgen"]) == 6 and all("taskset -c 0" in c for c in report["loadgen"])
    assert "bench-chat" in report["configs"]["farebox-sqlite.yaml"]


def test_the_results_file_links_the_docs_from_where_it_was_written(
    tiny: tuple[dict[str, Any], str],
) -> None:
    _, markdown = tiny
    command = shlex.split(re.search(r"Written by `([^`]*)`", markdown)[1])
    written = Path(command[command.index("--results") + 1])
    link = re.search(r"\[docs/performance\.md\]\(([^)]*)\)", markdown)[1]
    assert (written.parent / link).resolve() == BENCH.parents[1] / "docs" / "performance.md"
