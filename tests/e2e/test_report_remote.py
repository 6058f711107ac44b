"""`farebox report --url` against a real `farebox serve` process with an admin key: a team
key's report has its own team only, a finance key's has every team, and a refused read exits
non-zero with the server's own message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.servers import free_port, sim_only_config

ADMIN_KEY = "farebox-admin-report-remote-0123456789"


@dataclass
class Served:
    url: str
    keys: dict[str, str]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(extra)
    return env


def _wait_ready(
    url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 180
) -> None:
    """Wait until /readyz answers 200 to the admin key (litellm warmed); fail if it exits."""
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/readyz", headers=headers, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("farebox serve did not become ready")


def _key(url: str, **attributes: Any) -> str:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    response = httpx.post(f"{url}/admin/keys", json=attributes, headers=headers, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def _work(url: str, key: str, task: str, calls: int) -> None:
    """`calls` chat calls of one task, the last one closing it."""
    with openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as client:
        for n in range(calls):
            headers = {"X-Task-Id": task, **({"X-Task-Done": "true"} if n == calls - 1 else {})}
            client.chat.completions.create(
                model="sim-chat",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=16,
                extra_headers=headers,
            )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`farebox serve` (bundled simulator) with an admin key, after two teams' work."""
    workdir = tmp_path_factory.mktemp("report-remote")
    port = free_port()
    config = str(sim_only_config(workdir / "sim-only.yaml"))  # litellm is not the subject
    env = _env(FAREBOX_DATA_DIR=str(workdir / "data"), FAREBOX_ADMIN_KEY=ADMIN_KEY)
    env["FAREBOX_CONFIG"] = config
    log = workdir / "serve.log"  # a file, not a pipe nobody drains while the server logs
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log)
        keys = {
            "alpha": _key(url, team="alpha"),
            "beta": _key(url, team="beta"),
            "finance": _key(url, role="finance"),
        }
        _work(url, keys["alpha"], "alpha-run", 2)
        _work(url, keys["beta"], "beta-run", 3)
        yield Served(url, keys)
    finally:
        process.terminate()
        process.wait(timeout=30)


def report(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    """`farebox report ...` as a user runs it, the key in FAREBOX_API_KEY."""
    env = _env(COLUMNS="160", NO_COLOR="1", **({"FAREBOX_API_KEY": key} if key else {}))
    return subprocess.run(
        [sys.executable, "-m", "gateway", "report", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def _json(served: Served, key: str, *args: str) -> dict[str, Any]:
    result = report("--url", served.url, "--json", *args, key=served.keys[key])
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _groups(document: dict[str, Any], table: str) -> list[str]:
    return [row["group"] for row in document[table]]


def test_a_team_key_gets_its_own_teams_report(served: Served) -> None:
    alpha = _json(served, "alpha")
    everyone = _json(served, "finance")
    for table in ("spend", "tasks", "outcomes"):
        assert _groups(alpha, table) == ["alpha"]
        assert set(_groups(everyone, table)) == {"alpha", "beta"}
        assert [r for r in everyone[table] if r["group"] == "alpha"] == alpha[table]
    assert alpha["spend"][0]["request_count"] == 2 and alpha["tasks"][0]["finished_tasks"] == 1
    beta = _json(served, "finance", "--team", "beta")
    assert _groups(beta, "spend") == ["beta"] and beta["spend"][0]["request_count"] == 3


def test_the_tables_show_the_keys_team_only(served: Served) -> None:
    result = report("--url", f"{served.url}/v1/", key=served.keys["beta"])
    assert result.returncode == 0, result.stderr
    assert "Spend by team" in result.stdout and "beta" in result.stdout
    assert "alpha" not in result.stdout


def test_a_refused_read_exits_non_zero_with_the_servers_message(served: Served) -> None:
    other = report("--url", served.url, "--team", "beta", key=served.keys["alpha"])
    assert other.returncode == 2 and other.stdout == ""
    assert "403" in other.stderr and "own team's data only" in other.stderr
    assert "team_not_allowed" in other.stderr
    wrong = report("--url", served.url, key="fbx-not-a-key")
    assert wrong.returncode == 2 and "401" in wrong.stderr and "invalid API key" in wrong.stderr
    none = report("--url", served.url)
    assert none.returncode == 2 and "no API key" in none.stderr


def test_an_unreachable_gateway_is_an_error_not_a_hang() -> None:
    result = report("--url", f"http://127.0.0.1:{free_port()}", key="fbx-any")
    assert result.returncode == 2 and "cannot reach" in result.stderr
    both = report("--url", "http://x", "--database-url", "sqlite:///x.db")
    assert both.returncode == 2 and "not both" in both.stderr
