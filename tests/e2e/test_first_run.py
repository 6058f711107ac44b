"""A first run, as a new user meets it: the README's examples, the hints and the errors.

One gateway on the embedded default configuration (the bundled simulator) on a real port
serves the whole file; the CLI runs in-process (typer's runner) where it can.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from gateway.app import create_app
from gateway.cli import _banner
from gateway.cli import app as cli
from gateway.config import load_config
from gateway.services import Services
from gateway.settings import DEFAULT_CONFIG, Settings
from tests.pg import PG_ADMIN_DB, pg_url, require_postgres
from tests.servers import ServerThread, free_port, running

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("first-run") / "data"


@pytest.fixture(scope="module")
def served(data_dir: Path) -> Iterator[tuple[ServerThread, FastAPI]]:
    """`farebox serve` with nothing set: the embedded default, open mode, the simulator."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("FAREBOX_")]:
            patch.delenv(name)
        settings = Settings(data_dir=data_dir)
        app = create_app(settings, load_config(settings.config_path()))  # as `serve` does
        with running(app, settings) as server:
            yield server, app


@pytest.fixture
def server(served: tuple[ServerThread, FastAPI]) -> ServerThread:
    return served[0]


@pytest.fixture
def services(served: tuple[ServerThread, FastAPI]) -> Services:
    found: Services = served[1].state.services
    return found


def test_the_readme_sdk_example_runs(server: ServerThread, tmp_path: Path) -> None:
    env = {**os.environ, "FAREBOX_BASE_URL": f"{server.url}/v1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "example.py")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "CompletionUsage(" in done.stdout  # the whole reply's usage, then the stream's
    assert done.stdout.count("CompletionUsage(") == 2


def test_the_readme_request_and_recorded_conversation(server: ServerThread) -> None:
    """`curl .../v1/prefix/lint -d @request.json` (curl's -d sends a form content-type),
    `farebox lint recorded-conversation.jsonl` and `farebox policy explain request.json`."""
    body = (EXAMPLES / "request.json").read_bytes()
    form = {"content-type": "application/x-www-form-urlencoded"}
    linted = httpx.post(f"{server.url}/v1/prefix/lint", content=body, headers=form)
    assert linted.status_code == 200, linted.text
    assert {f["kind"] for f in linted.json()["findings"]} >= {"timestamp"}
    result = CliRunner().invoke(cli, ["lint", str(EXAMPLES / "recorded-conversation.jsonl")])
    assert result.exit_code == 1  # the README: "exit 1 when anything is found"
    assert "3 finding(s) in 3 request(s)" in result.output
    explain = ["policy", "explain", str(EXAMPLES / "request.json"), "--json"]
    config = ["--config", str(ROOT / "policies" / "coding-agent.yaml")]
    result = CliRunner().invoke(cli, [*explain, *config])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["alias"] == "sim-thinker"


def test_a_base_url_without_v1_gets_a_hint(server: ServerThread) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="anything", max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(
            model="sim-chat", messages=[{"role": "user", "content": "hi"}]
        )
    said = raised.value.message
    assert "did you mean /v1/chat/completions?" in said
    assert f"base_url to {server.url}/v1" in said
    # The anthropic SDK adds /v1 itself: a base_url ending in /v1 asks for /v1/v1/messages.
    twice = httpx.post(f"{server.url}/v1/v1/messages", json={})
    assert twice.status_code == 404
    assert (
        f"did you mean /v1/messages? (/v1 appears twice): set the anthropic SDK's base_url to {server.url} (no /v1)"
        in twice.text
    )
    # A path that is no route with /v1 either gets the plain 404.
    plain = httpx.get(f"{server.url}/nothing-here")
    assert plain.status_code == 404 and "did you mean" not in plain.text
    assert plain.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_json_bodies_need_no_content_type(server: ServerThread, content_type: str | None) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    chat = {"model": "sim-chat", "messages": [{"role": "user", "content": "hi"}]}
    calls: list[tuple[str, dict[str, Any], int]] = [
        (
            "/v1/cost/estimate",
            {"model": "sim-chat", "input_tokens": 1000, "output_tokens": 10},
            200,
        ),
        ("/v1/chat/completions", chat, 200),
        ("/v1/prefix/lint", chat, 200),
        ("/v1/tasks/first-run/finish", {"outcome": "success"}, 200),
        ("/v1/messages/count_tokens", {"model": "sim-claude", "messages": chat["messages"]}, 200),
        ("/admin/keys", {"team": "first-run"}, 201),
    ]
    for path, body, status in calls:
        sent = httpx.post(f"{server.url}{path}", content=json.dumps(body), headers=headers)
        assert sent.request.headers.get("content-type") == content_type
        assert sent.status_code == status, (path, sent.text)


def test_the_banner_says_what_is_in_force(
    services: Services, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(data_dir=data_dir, port=4000)
    _banner(settings)(services)
    said = capsys.readouterr().out
    assert "serving on http://127.0.0.1:4000/v1" in said
    assert (
        f"config: the embedded default, {DEFAULT_CONFIG} (part of the package: not reloaded)"
        in said
    )
    assert f"cp {DEFAULT_CONFIG} farebox.yaml && FAREBOX_CONFIG=farebox.yaml farebox serve" in said
    assert "set FAREBOX_CONFIG to serve real ones" in said  # it is not set
    assert "OPEN MODE" in said and "auth: keys" not in said
    assert f"ledger: sqlite+aiosqlite:///{data_dir / 'farebox.db'}" in said

    mine = tmp_path / "farebox.yaml"
    mine.write_bytes(DEFAULT_CONFIG.read_bytes())
    keyed = Settings(data_dir=data_dir, config=mine, admin_key="first-run-admin-key")  # type: ignore[arg-type]
    _banner(keyed)(services)
    said = capsys.readouterr().out
    assert f"config: {mine} (reloaded on change and on SIGHUP)" in said
    assert "FAREBOX_CONFIG" not in said  # it is set: nothing tells the user to set it
    assert "auth: keys" in said and "OPEN MODE" not in said
    assert "first-run-admin-key" not in said


def test_the_embedded_default_is_not_reloaded_as_the_banner_says(server: ServerThread) -> None:
    refused = httpx.post(f"{server.url}/admin/reload")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_config"
    assert "to reload, serve a file with FAREBOX_CONFIG" in refused.json()["error"]["message"]


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert re.fullmatch(
        r"farebox \d+\.\d+\.\d+\S* \((native: (prefix locator|JSON walker|stream reader)"
        r"(, (JSON walker|stream reader))*|pure "
        r"Python: no native module loaded); Python 3\.\d+\.\d+\)\n",
        result.output,
    ), result.output


def test_version_says_pure_python_when_no_native_module_loads(tmp_path: Path) -> None:
    off = {
        **os.environ,
        "FAREBOX_PREFIX_NATIVE": "0",
        "FAREBOX_RAWJSON_NATIVE": "0",
        "FAREBOX_STREAM_NATIVE": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--version"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=off,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(pure Python: no native module loaded; Python 3." in done.stdout


def _serve(env: dict[str, str], *args: str) -> tuple[int, str]:
    """`farebox serve` in-process: only its refusals, which come before the app starts."""
    clean = {name: None for name in os.environ if name.startswith("FAREBOX_")}
    result = CliRunner().invoke(cli, ["serve", *args], env={**clean, **env})
    return result.exit_code, result.output


def test_a_busy_port_is_one_line_before_any_banner(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, said = _serve({"FAREBOX_DATA_DIR": str(tmp_path)}, "--port", str(port))
    assert code == 2
    assert said.count("\n") == 1 and "serving on" not in said
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in said
    assert f"FAREBOX_PORT={port + 1} or make run PORT={port + 1}" in said


def test_invalid_settings_and_refusals_are_one_line(tmp_path: Path) -> None:
    code, said = _serve({"FAREBOX_PORT": "four-thousand", "FAREBOX_DATA_DIR": str(tmp_path)})
    assert code == 2 and said.count("\n") == 1, said
    assert said.startswith("farebox: invalid settings: port: Input should be a valid integer")
    code, said = _serve({"FAREBOX_DATA_DIR": str(tmp_path)}, "--host", "[/bold]0.0.0.0")
    assert code == 2 and said.count("\n") == 1, said  # the host is not read as markup
    assert said.startswith("farebox: refusing to serve in open mode on [/bold]0.0.0.0:")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://postgres:s3cret@127.0.0.1:{port}/x",
            "cannot reach the ledger database postgresql://postgres:***@127.0.0.1:{port}/x",
        ),
        (
            "not a url at all s3cret",
            "FAREBOX_DATABASE_URL is not a database URL: use sqlite+aiosqlite:///",
        ),
        ("mysql://u:s3cret@h/db", "unsupported ledger database URL scheme 'mysql'"),
    ],
)
def test_a_wrong_database_url_is_one_line_with_the_fix(url: str, expected: str) -> None:
    port = free_port()
    code, said = _serve({"FAREBOX_DATABASE_URL": url.format(port=port)}, "--port", "0")
    assert code == 2
    assert said.count("\n") == 1, said  # one line: no traceback
    assert expected.format(port=port) in said
    assert "s3cret" not in said


def test_an_unusable_data_folder_is_one_line_with_the_fix(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    code, said = _serve({"FAREBOX_DATA_DIR": str(a_file / "data")}, "--port", "0")
    assert code == 2 and said.count("\n") == 1, said
    expected = f"cannot open the ledger file {a_file / 'data' / 'farebox.db'} (Not a directory)"
    assert expected in said and "set FAREBOX_DATA_DIR to a writable folder" in said


@pytest.mark.postgres
def test_a_missing_postgresql_database_says_so() -> None:
    try:
        asyncio.run(_reach_postgres())
    except (OSError, asyncpg.PostgresError) as exc:
        require_postgres(f"{type(exc).__name__}: {exc}")
    url = "postgresql://postgres@127.0.0.1:5432/farebox_first_run_missing"
    code, said = _serve({"FAREBOX_DATABASE_URL": url}, "--port", "0")
    assert code == 2 and said.count("\n") == 1, said
    assert 'database "farebox_first_run_missing" does not exist' in said
    assert "or create the database" in said


async def _reach_postgres() -> None:
    connection = await asyncpg.connect(pg_url(PG_ADMIN_DB).replace("+asyncpg", ""), timeout=5)
    await connection.close()


def test_report_elsewhere_names_the_missing_ledger_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 2
    expected = tmp_path / "home" / ".local" / "share" / "farebox" / "farebox.db"
    assert f"farebox report: no ledger at {expected}: the gateway writes it there" in result.output
    assert "--url" in result.output and result.output.count("\n") == 1
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "home").exists()


def test_report_elsewhere_reads_the_gateways_ledger(
    server: ServerThread, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    httpx.post(f"{server.url}/v1/cost/estimate", json={"model": "sim-chat"})  # any traffic
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["report", "--json"], env={"FAREBOX_DATA_DIR": str(data_dir)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["group_by"] == "team"
    assert list(tmp_path.iterdir()) == []


def test_make_run_passes_the_port_only_when_given() -> None:
    def recipe(*args: str) -> str:
        env = {k: v for k, v in os.environ.items() if k not in {"HOST", "PORT"}}  # make reads them
        done = subprocess.run(
            ["make", "-n", "-o", ".venv/.installed", "run", *args],
            capture_output=True, text=True, cwd=ROOT, check=True, env=env,
        )  # fmt: skip
        return done.stdout

    assert re.search(r"farebox serve\s+--port 4100\s*$", recipe("PORT=4100"), re.M)
    assert re.search(r"farebox serve\s+--host 0\.0\.0\.0\s*$", recipe("HOST=0.0.0.0"), re.M)
    bare = recipe()
    assert re.search(r"farebox serve\s*$", bare, re.M), bare  # FAREBOX_PORT decides
    assert "--port" not in bare and "4000" not in bare
