"""`farebox keys` and `farebox audit` against a real gateway on a real port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gateway import cli
from tests.e2e.conftest import Gateway, GatewayFactory

ADMIN_KEY = "adm-cli-0123456789abcdef"


@pytest.fixture
def keyed(make_gateway: GatewayFactory) -> Gateway:
    return make_gateway(admin_key=ADMIN_KEY)


def _run(gateway: Gateway, *args: str, admin_key: str | None = ADMIN_KEY) -> Any:
    env = {"FAREBOX_URL": gateway.server.url, "COLUMNS": "200"}
    if admin_key is not None:
        env["FAREBOX_ADMIN_KEY"] = admin_key
    return CliRunner().invoke(cli.app, list(args), env=env)


def _json(gateway: Gateway, *args: str) -> Any:
    result = _run(gateway, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_create_list_show_rotate_revoke(keyed: Gateway) -> None:
    created = _run(keyed, "keys", "create", "--team", "research", "--project", "agents",
                   "--model", "chat", "--model", "sim-*", "--daily-usd", "2.50",
                   "--requests-per-min", "60", "--name", "ci bot")  # fmt: skip
    assert created.exit_code == 0, created.output
    secret = next(
        line.split()[-1] for line in created.stdout.splitlines() if line.startswith("key:")
    )
    assert secret.startswith("fbx-")
    assert "not shown again" in created.stderr
    listed = _json(keyed, "keys", "list")["data"]
    [key] = listed
    assert key["prefix"] == secret[:12] and key["team"] == "research"
    assert key["models"] == ["chat", "sim-*"] and key["budget"]["daily_usd"] == "2.50"
    assert key["rate_limit"]["requests_per_min"] == 60 and key["name"] == "ci bot"
    table = _run(keyed, "keys", "list")
    assert table.exit_code == 0 and key["id"] in table.stdout and secret not in table.stdout
    shown = _run(keyed, "keys", "show", key["id"])
    assert shown.exit_code == 0 and "research" in shown.stdout and secret not in shown.stdout
    # The key works for a model call.
    reply = keyed.sdk(api_key=secret).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices
    rotated = _json(keyed, "keys", "rotate", key["id"], "--overlap-s", "60")
    assert rotated["key"] != secret and rotated["rotated_from"] == key["id"]
    assert rotated["previous"]["expires_at"]
    revoked = _json(keyed, "keys", "revoke", rotated["id"])
    assert revoked["state"] == "revoked"
    headers = {"Authorization": f"Bearer {rotated['key']}"}
    assert httpx.get(f"{keyed.base_url}/models", headers=headers).status_code == 401
    entries = _json(keyed, "audit")["data"]
    assert [(e["action"], e["outcome"]) for e in entries] == [
        ("keys.revoke", "accepted"),
        ("keys.rotate", "accepted"),
        ("keys.create", "accepted"),
    ]
    audit_table = _run(keyed, "audit", "--action", "keys.create")
    assert audit_table.exit_code == 0 and key["id"] in audit_table.stdout


def test_attributes_from_a_file(keyed: Gateway, tmp_path: Path) -> None:
    path = tmp_path / "key.json"
    path.write_text(json.dumps({"team": "ops", "role": "service", "max_n": 3}))
    made = _json(keyed, "keys", "create", "--attributes", f"@{path}", "--team", "platform")
    assert (made["team"], made["role"], made["max_n"]) == ("platform", "service", 3)


def test_errors_exit_non_zero_with_the_server_message(keyed: Gateway) -> None:
    missing = _run(keyed, "keys", "show", "key_nope")
    assert missing.exit_code == 1 and "404" in missing.stderr and "key_nope" in missing.stderr
    bad = _run(keyed, "keys", "create", "--role", "boss")
    assert bad.exit_code == 1 and "role" in bad.stderr
    wrong = _run(keyed, "keys", "list", admin_key="adm-wrong")
    assert wrong.exit_code == 1 and "401" in wrong.stderr
    none = _run(keyed, "audit", admin_key=None)
    assert none.exit_code == 1 and "401" in none.stderr
    down = CliRunner().invoke(cli.app, ["keys", "list", "--url", "http://127.0.0.1:9"])
    assert down.exit_code == 1 and "cannot reach the gateway" in down.stderr


def test_the_installed_command_against_a_running_gateway(keyed: Gateway) -> None:
    env = {**os.environ, "FAREBOX_ADMIN_KEY": ADMIN_KEY}
    farebox = Path(sys.executable).with_name("farebox")
    command = [str(farebox), "keys", "create", "--team", "research", "--url", keyed.server.url]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "key: fbx-" in done.stdout and "not shown again" in done.stderr
