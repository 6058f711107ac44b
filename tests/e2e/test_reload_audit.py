"""/admin/reload: the admin key only, every reload audited, a flood of reloads parses once."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

ADMIN_KEY = "farebox-admin-reload-test-key-42"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
RULE = "rules:\n  - name: cap-chat\n    match: {model: chat}\n    max_tokens: {ceiling: 64}\n"


def _config(sim: SimControl, *aliases: str, rules: str = "") -> str:
    routes = "".join(
        f"  {alias}:\n    model: sim-chat\n    base_url: {sim.url}/v1\n" for alias in aliases
    )
    return f"models:\n{routes}{rules}"


@pytest.fixture
def config_file(tmp_path: Path, sim: SimControl) -> Path:
    path = tmp_path / "farebox.yaml"
    path.write_text(_config(sim, "chat", "old"))
    return path


@pytest.fixture
def keyed(make_gateway: GatewayFactory, config_file: Path) -> Gateway:
    return make_gateway(config=config_file, admin_key=ADMIN_KEY)


def _reload(gateway: Gateway, headers: dict[str, str] | None = None) -> httpx.Response:
    url = f"{gateway.server.url}/admin/reload"
    return httpx.post(url, headers=ADMIN if headers is None else headers, timeout=30)


def _audit(gateway: Gateway, **params: Any) -> list[dict[str, Any]]:
    url = f"{gateway.server.url}/admin/audit"
    response = httpx.get(url, headers=ADMIN, params={"action": "config.reload", **params})
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def _reloads(gateway: Gateway) -> dict[str, float]:
    text = httpx.get(f"{gateway.server.url}/metrics", headers=ADMIN).text
    found = re.findall(r'farebox_config_reloads_total\{result="(\w+)"\} (\S+)', text)
    return {result: float(value) for result, value in found}


def test_a_reload_is_audited_with_hash_and_diff(
    keyed: Gateway, config_file: Path, sim: SimControl
) -> None:
    config_file.write_text(_config(sim, "chat", "new", rules=RULE))
    response = _reload(keyed)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "reloaded" and sorted(body["models"]) == ["chat", "new"]
    changes = {"models_added": ["new"], "models_removed": ["old"], "rules_added": ["cap-chat"]}
    assert body["changes"] == changes
    [entry] = _audit(keyed)
    assert entry["actor"] == "admin" and entry["outcome"] == "accepted"
    assert entry["target"] == str(config_file)
    assert entry["content_hash"] == body["content_hash"] and len(body["content_hash"]) == 64
    assert entry["detail"] == {"result": "reloaded", **changes}
    again = _reload(keyed).json()  # the same file: not parsed again
    assert again["status"] == "unchanged" and again["content_hash"] == body["content_hash"]
    assert _audit(keyed)[0]["detail"] == {"result": "unchanged"}


def test_a_refused_reload_is_audited_with_the_reason(
    keyed: Gateway, config_file: Path, sim: SimControl
) -> None:
    config_file.write_text(_config(sim, "chat") + "  broken: {model: 3, nonsense: true}\n")
    response = _reload(keyed)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_config"
    [entry] = _audit(keyed)
    assert entry["outcome"] == "refused" and entry["detail"]["result"] == "refused"
    assert str(config_file) in entry["detail"]["reason"]
    models = httpx.get(f"{keyed.base_url}/models", headers=ADMIN).json()["data"]
    assert sorted(m["id"] for m in models) == ["chat", "old"]  # the old one stays in force


def test_only_the_admin_key_reloads(keyed: Gateway) -> None:
    made = httpx.post(f"{keyed.server.url}/admin/keys", headers=ADMIN, json={"team": "a"})
    assert made.status_code == 201, made.text
    member = {"Authorization": f"Bearer {made.json()['key']}"}
    refused = _reload(keyed, member)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == (
        "admin endpoints take the admin key, not a virtual key"
    )
    assert _reload(keyed, {}).status_code == 401
    assert _audit(keyed) == []  # neither reached the reloader


def test_fifty_concurrent_reloads_parse_the_file_once(
    keyed: Gateway, config_file: Path, sim: SimControl
) -> None:
    config_file.write_text(_config(sim, "chat", "new"))
    before = _reloads(keyed)

    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=ADMIN, timeout=60) as client:
            url = f"{keyed.server.url}/admin/reload"
            return list(await asyncio.gather(*(client.post(url) for _ in range(50))))

    responses = asyncio.run(flood())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    statuses = [r.json()["status"] for r in responses]
    assert "reloaded" in statuses and set(statuses) <= {"reloaded", "unchanged"}
    after = _reloads(keyed)
    assert after.get("reloaded", 0) - before.get("reloaded", 0) == 1  # one parse
    runs = sum(after.values()) - sum(before.values())
    assert runs < 50  # callers shared reloads: one running, one queued behind it
    assert len(_audit(keyed, limit=1000)) == runs  # one audit entry per reload that ran


def test_the_file_watcher_reloads_and_is_audited(
    make_gateway: GatewayFactory, config_file: Path, sim: SimControl
) -> None:
    gateway = make_gateway(config=config_file, admin_key=ADMIN_KEY, reload_poll_s=0.05)
    config_file.write_text(_config(sim, "chat", "watched"))
    deadline = time.monotonic() + 10
    while not (entries := _audit(gateway)):
        assert time.monotonic() < deadline, "the file watcher never reloaded"
        time.sleep(0.05)
    assert entries[0]["actor"] == "file-watch" and entries[0]["outcome"] == "accepted"
    assert entries[0]["detail"]["models_added"] == ["watched"]
