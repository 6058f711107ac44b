"""Red-team regressions for issue 11 (tenants): each test is an attack that once worked.

A real gateway with an admin key, real keys from `POST /admin/keys`, real Redis, the
bundled simulator as upstream; raw sockets where a client library would refuse to send
the hostile request (two headers of one name).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.redis_service import require_redis

ADMIN_KEY = "adm-red-team-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _config(sim: SimControl, team: str, daily_usd: str = "1") -> str:
    return f"""
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim.base_url}", family: openai}}
  claude:
    {{provider: anthropic, model: claude-sim, base_url: "{sim.url}",
     api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
prices:
  chat: {{input: 2, output: 10}}
  claude: {{input: 2, output: 10}}
tenants:
  teams:
    {team}: {{budget: {{daily_usd: {daily_usd}}}}}
"""


class World:
    def __init__(self, gateway: Gateway, sim: SimControl, team: str) -> None:
        self.gateway, self.sim, self.team = gateway, sim, team
        self.url = gateway.server.url

    def make_key(self, **attributes: Any) -> dict[str, Any]:
        made = httpx.post(f"{self.url}/admin/keys", json=attributes, headers=ADMIN, timeout=30)
        assert made.status_code == 201, made.text
        return dict(made.json())

    def raw(self, request: bytes) -> tuple[int, bytes]:
        """Send `request` as is; the status and body of the answer."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(request)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body

    def sent(self) -> list[dict[str, Any]]:
        return [json.loads(base64.b64decode(str(r["body_b64"]))) for r in self.sim.requests()]


@pytest.fixture
def world(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> World:
    team = f"red-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "farebox.yaml"
    path.write_text(_config(sim, team))
    gateway = make_gateway(config=path, admin_key=ADMIN_KEY, redis_url=require_redis())
    return World(gateway, sim, team)


def _get(path: str, *headers: bytes) -> bytes:
    lines = [f"GET {path} HTTP/1.1".encode(), b"Host: farebox", b"Connection: close", *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize("header", [b"Authorization: Bearer ", b"x-api-key: "])
def test_two_headers_carrying_two_keys_are_401_whichever_comes_first(
    world: World, header: bytes
) -> None:
    """A proxy that checks the first of two Authorization headers while the gateway used the
    last let a virtual key's holder pass the admin key along (or bill another key)."""
    key = world.make_key(team=world.team)["key"].encode()
    admin = ADMIN_KEY.encode()
    for first, second in ((key, admin), (admin, key)):
        status, body = world.raw(_get("/admin/keys", header + first, header + second))
        assert status == 401, body
        error = json.loads(body)["error"]
        assert error["code"] == "invalid_api_key" and "two different keys" in error["message"]
        assert ADMIN_KEY not in body.decode() and key.decode() not in body.decode()
    # The same key twice is one credential, not a conflict.
    status, body = world.raw(_get("/v1/models", header + key, header + key))
    assert status == 200, body


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_tokens", "100000"), ("max_completion_tokens", 100000.0), ("n", "8"), ("n", 8.0)],
)
def test_a_cap_or_n_an_upstream_would_coerce_is_a_400_never_forwarded(
    world: World, field: str, value: object
) -> None:
    """vLLM (and the simulator) read `"100000"` as 100000 and `"8"` as 8, while the budget's
    worst case read only integers: the request held 32,768 output tokens for one choice
    and could spend past it. OpenAI refuses these types; so does the gateway now."""
    key = world.make_key(team=world.team)["key"]
    body: dict[str, Any] = {"model": "chat", "messages": HELLO, "max_tokens": 20, field: value}
    reply = httpx.post(
        f"{world.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and field in (error["param"] or "")
    assert world.sent() == []


def test_a_task_id_holding_a_slash_is_read_and_finished_by_its_team_only(world: World) -> None:
    """Task ids may hold `/` (`org/repo#12`): sent as %2F, the server decodes it, and the
    routes' one-segment `{task_id}` answered "Not Found" for the task's own team."""
    own = world.gateway.sdk(api_key=world.make_key(team=world.team)["key"])
    run = uuid.uuid4().hex[:8]  # claims live in the shared Redis
    task = f"org-{run}/repo#12"
    own.chat.completions.create(
        model="chat", messages=HELLO, max_tokens=5, extra_headers={"X-Task-Id": task}
    )
    path = f"{world.url}/v1/tasks/org-{run}%2Frepo%2312"
    owner = {"Authorization": f"Bearer {own.api_key}"}
    other = {"Authorization": f"Bearer {world.make_key(team='elsewhere')['key']}"}
    read = httpx.get(path, headers=owner, timeout=30)  # reads catch up with the writer
    assert read.status_code == 200, read.text
    assert read.json()["task_id"] == task and read.json()["team"] == world.team
    hidden = httpx.get(path, headers=other, timeout=30)
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "task_not_found"
    refused = httpx.post(f"{path}/finish", json={}, headers=other, timeout=30)
    assert refused.status_code == 403, refused.text
    finished = httpx.post(f"{path}/finish", json={"outcome": "success"}, headers=owner, timeout=30)
    assert finished.status_code == 200 and finished.json()["task_id"] == task, finished.text


@pytest.mark.parametrize("value", ["100000", 100000.0])
def test_a_messages_cap_an_upstream_would_coerce_is_a_400_never_forwarded(
    world: World, value: object
) -> None:
    """The same hole on /v1/messages: `max_tokens: "100000"` passed the lax parse, the
    budget held the model's maximum (or 32,768), and an upstream that coerces (vLLM's
    Messages endpoint) would honour 100,000."""
    key = world.make_key(team=world.team)["key"]
    reply = httpx.post(
        f"{world.url}/v1/messages",
        json={"model": "claude", "messages": HELLO, "max_tokens": value},
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in error["error"]["message"]
    assert world.sent() == []


def _refused_for_quota(client: openai.OpenAI) -> bool:
    try:
        client.chat.completions.create(model="chat", messages=HELLO, max_tokens=20)
    except openai.RateLimitError as exc:
        assert exc.code == "insufficient_quota", exc
        return True
    return False


def test_rotating_a_key_keeps_what_it_spent_against_its_budget(world: World) -> None:
    """A key's budget was counted under its id, and a rotation makes a new id: the
    successor started a fresh lifetime budget, and during the overlap the old and the new
    key each had a whole one. Both now spend the line's one budget."""
    made = world.make_key(team=world.team, budget={"total_usd": "0.0008"})
    old = world.gateway.sdk(api_key=made["key"])
    served = 0
    while not _refused_for_quota(old):  # each request holds ~$0.0003 and spends less
        served += 1
        assert served < 20, "the key's budget never refused"
    rotated = httpx.post(
        f"{world.url}/admin/keys/{made['id']}/rotate",
        json={"overlap_s": 600},
        headers=ADMIN,
        timeout=30,
    )
    assert rotated.status_code == 201, rotated.text
    new = world.gateway.sdk(api_key=rotated.json()["key"])
    assert _refused_for_quota(new), "the rotated key got a fresh budget"
    assert _refused_for_quota(old)  # still in its overlap, still out of budget
    again = httpx.post(
        f"{world.url}/admin/keys/{rotated.json()['id']}/rotate", json={}, headers=ADMIN, timeout=30
    )
    assert again.status_code == 201, again.text  # a line of three: still the first's budget
    assert _refused_for_quota(world.gateway.sdk(api_key=again.json()["key"]))
    assert len(world.sim.requests()) == served


@pytest.mark.parametrize("admin_key", ["", "  padded-admin-key-0123456789  "])
def test_serve_refuses_an_admin_key_that_is_empty_or_padded(tmp_path: Path, admin_key: str) -> None:
    """`FAREBOX_ADMIN_KEY=` (a compose file's unset variable) served 0.0.0.0 in open mode
    (anyone could make keys and spend) while the banner and /readyz said `auth: keys`; a
    padded key could never match. Both now stop `farebox serve` before it listens, and
    the refusal does not echo the key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(FAREBOX_DATA_DIR=str(tmp_path / "data"), FAREBOX_ADMIN_KEY=admin_key)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--host", "0.0.0.0", "--port", "9"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # before the fix it served until killed here
    )
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, said
    assert "FAREBOX_ADMIN_KEY" in said and "serving on" not in said
    assert not admin_key.strip() or admin_key.strip() not in said
