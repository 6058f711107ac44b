"""The spoofing attempts of issue 11, each refused or clamped, seen from three sides.

A gateway with an admin key in front of the simulator; keys made through `POST /admin/keys`;
the official openai SDK as the client. For each attempt: what the SDK got (403 naming the
header or field, or a clamped reply), what the simulator RECEIVED (nothing, or the clamped
value), and what the ledger BILLED (no row for a refusal; the key's team for the rest).
Task scoping across two replicas on real Redis is at the end.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.redis_service import require_redis

ADMIN_KEY = "farebox-admin-spoofing-test-0123456789"
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
# A chat product's policy: paid plans get priority by default, everyone a capped answer.
POLICY: dict[str, Any] = {
    "defaults": {"max_tokens": {"default": 800, "ceiling": 2048}},
    "rules": [
        {"name": "paid", "match": {"headers": {"x-plan": "pro*"}}, "tier": {"choose": "priority"}},
        {
            "name": "free",
            "match": {"headers": {"x-plan": "free"}},
            "max_tokens": {"default": 400, "ceiling": 1024},
            "tier": {"forbid": ["priority", "fast"]},
        },
    ],
    "routing": {"chat": {"tiers": {"priority": {"set": {"service_tier": "priority"}}}}},
}
PRICES = {
    "chat": {"input": 1, "output": 3, "tiers": {"priority": {"multiplier": 2}}},
    "claude": {"input": 5, "output": 25, "tiers": {"priority": {"multiplier": "1.5"}}},
}


class Keyed:
    """A keyed gateway, its simulator, and the keys made for the test."""

    def __init__(self, gateway: Gateway, sim: SimControl) -> None:
        self.gateway, self.sim = gateway, sim
        self.url = gateway.server.url

    def make_key(self, **attributes: Any) -> tuple[str, str]:
        """A new virtual key: (secret, id)."""
        reply = httpx.post(
            f"{self.url}/admin/keys",
            json=attributes,
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=30,
        )
        assert reply.status_code == 201, reply.text
        return reply.json()["key"], reply.json()["id"]

    def sdk(self, secret: str) -> openai.OpenAI:
        return self.gateway.sdk(api_key=secret)

    def received(self) -> list[dict[str, Any]]:
        """The bodies the simulator received, in order."""
        return [json.loads(base64.b64decode(str(r["body_b64"]))) for r in self.sim.requests()]

    def rows(self, where: str, *args: Any) -> list[dict[str, Any]]:
        """Ledger rows of `requests` matching a SQL condition."""
        with sqlite3.connect(self.gateway.settings.data_dir / "farebox.db") as db:
            db.row_factory = sqlite3.Row
            found = db.execute(f"SELECT * FROM requests WHERE {where}", args).fetchall()
        return [dict(row) for row in found]

    def row(self, request_id: str) -> dict[str, Any]:
        """The ledger row of one request, once the writer has written it."""
        deadline = time.monotonic() + 15
        while not (rows := self.rows("request_id = ?", request_id)):
            assert time.monotonic() < deadline, f"no ledger row for {request_id}"
            time.sleep(0.05)
        return rows[0]


def _config(sim: SimControl, tmp_path: Path) -> Path:
    sim_url = sim.url
    models = {
        "chat": {"provider": "openai", "model": "sim-chat", "base_url": f"{sim_url}/v1"},
        "claude": {
            "provider": "anthropic",
            "model": "claude-sim",
            "base_url": sim_url,
            "api_key_env": "FAREBOX_TEST_ANTHROPIC_KEY",
        },
    }
    models["chat"]["family"] = "vllm"
    path = tmp_path / "farebox.yaml"
    path.write_text(yaml.safe_dump({"models": models, "prices": PRICES, **POLICY}))
    return path


@pytest.fixture
def keyed(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Keyed:
    gateway = make_gateway(admin_key=ADMIN_KEY, config=_config(sim, tmp_path))
    return Keyed(gateway, sim)


def _refused(call: Callable[[], Any], status: int = 403) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    assert caught.value.status_code == status, caught.value
    return caught.value


def _error(error: openai.APIStatusError) -> dict[str, Any]:
    body = error.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}, body
    return body


def _barrier(keyed: Keyed, client: openai.OpenAI) -> str:
    """An accepted request, whose row is written after every refused one before it was."""
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=HELLO)
    request_id = raw.headers["x-request-id"]
    keyed.row(request_id)
    return request_id


def test_identity_headers_of_a_member_key_are_refused(keyed: Keyed) -> None:
    secret, _ = keyed.make_key(team="growth", project="app", plan="free")
    client = keyed.sdk(secret)
    refused_ids = []
    for header, value in (
        ("X-Farebox-Team", "billing"),
        ("X-Farebox-Project", "payroll"),
        ("X-Plan", "pro"),
    ):
        spoofed = partial(client.chat.completions.create, extra_headers={header: value})
        error = _refused(partial(spoofed, model="chat", messages=HELLO))
        assert isinstance(error, openai.PermissionDeniedError)
        body = _error(error)
        assert (body["param"], body["code"]) == (header.lower(), "identity_header_not_allowed")
        assert body["type"] == "permission_error"
        refused_ids.append(error.request_id)
    assert keyed.received() == []  # nothing reached the upstream
    _barrier(keyed, client)
    assert keyed.rows("request_id IN (?, ?, ?)", *refused_ids) == []  # nor the ledger
    assert {row["team"] for row in keyed.rows("1 = 1")} == {"growth"}


def test_accepted_requests_bill_the_keys_identity(keyed: Keyed) -> None:
    member, member_id = keyed.make_key(team="growth", project="app")
    service, service_id = keyed.make_key(role="service", team="platform", project="infra")
    same = {"X-Farebox-Team": "growth", "X-Farebox-Project": "app"}  # equal: harmless
    raw = keyed.sdk(member).chat.completions.with_raw_response.create(
        model="chat", messages=HELLO, extra_headers=same
    )
    row = keyed.row(raw.headers["x-request-id"])
    assert (row["team"], row["project"], row["caller"]) == ("growth", "app", member_id)
    acting = {"X-Farebox-Team": "growth"}  # a service key acts for a team; project: its own
    raw = keyed.sdk(service).chat.completions.with_raw_response.create(
        model="chat", messages=HELLO, extra_headers=acting
    )
    row = keyed.row(raw.headers["x-request-id"])
    assert (row["team"], row["project"], row["caller"]) == ("growth", "infra", service_id)


def test_tiers_past_the_keys_are_refused_and_never_billed(keyed: Keyed) -> None:
    secret, _ = keyed.make_key(team="growth", plan="pro", tiers=["standard"])
    client = keyed.sdk(secret)
    create = client.chat.completions.create
    attempts: list[tuple[dict[str, Any], str]] = [
        ({"service_tier": "priority"}, "service_tier"),
        ({"extra_headers": {"X-Speed-Tier": "priority"}}, "x-speed-tier"),
        ({"extra_body": {"speed": "fast"}}, "speed"),
    ]
    for fields, param in attempts:
        error = _refused(lambda: create(model="claude", messages=HELLO, **fields))  # noqa: B023
        assert (_error(error)["param"], _error(error)["code"]) == (param, "tier_not_allowed")
    assert keyed.received() == []
    # The "paid" rule chooses priority for a pro plan: this key is billed at standard.
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=HELLO)
    assert raw.headers["x-farebox-tier"] == "standard"
    assert "service_tier" not in keyed.received()[-1]
    row = keyed.row(raw.headers["x-request-id"])
    assert (row["tier_served"], row["team"]) == ("standard", "growth")


def test_a_plans_limits_hold_for_its_keys(keyed: Keyed) -> None:
    """The free plan's ceiling and tier hold for a free key, whatever the body says."""
    secret, _ = keyed.make_key(team="growth", plan="free")
    create = keyed.sdk(secret).chat.completions.with_raw_response.create
    raw = create(
        model="chat", messages=HELLO, max_completion_tokens=100_000, service_tier="priority"
    )
    sent = keyed.received()[-1]
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 1024
    assert "service_tier" not in sent  # priority is forbidden on the free plan
    assert raw.headers["x-farebox-rule"] == "free"
    row = keyed.row(raw.headers["x-request-id"])
    assert (row["tier_served"], row["output_cap_clamped"], row["team"]) == (
        "standard",
        1,
        "growth",
    )


def test_auto_is_not_served_at_priority_to_a_key_without_it(keyed: Keyed) -> None:
    models = keyed.sim.http.get("/sim/config").json()["models"]
    for model in models:  # the simulator's Claude serves `auto` from priority capacity
        model["priority_capacity"] = model["name"] == "claude-sim"
    keyed.sim.http.post("/sim/config", json={"models": models}).raise_for_status()
    limited, _ = keyed.make_key(team="growth", tiers=["standard"])
    open_tier, _ = keyed.make_key(team="growth")
    served = {}
    for name, secret in (("limited", limited), ("unlimited", open_tier)):
        raw = keyed.sdk(secret).chat.completions.with_raw_response.create(
            model="claude", messages=HELLO, service_tier="auto"
        )
        served[name] = keyed.row(raw.headers["x-request-id"])["tier_served"]
        served[name + " sent"] = keyed.received()[-1].get("service_tier")
    assert served == {
        "limited": "standard",
        "limited sent": "standard_only",
        "unlimited": "priority",  # what the limited key would have been billed
        "unlimited sent": "auto",
    }


@pytest.mark.parametrize("field", ["max_completion_tokens", "max_tokens"])
def test_an_output_cap_past_the_keys_is_clamped(keyed: Keyed, field: str) -> None:
    secret, _ = keyed.make_key(team="growth", max_output_tokens=50)
    create = keyed.sdk(secret).chat.completions.with_raw_response.create
    raw = create(model="chat", messages=HELLO, extra_body={field: 100_000})
    sent = keyed.received()[-1]
    assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 50
    row = keyed.row(raw.headers["x-request-id"])
    assert row["output_cap_clamped"] and row["completion_tokens"] <= 50
    raw = create(model="chat", messages=HELLO)  # none asked: the key's cap, under the policy's
    assert keyed.received()[-1]["max_tokens"] == 50


def test_n_past_the_keys_cap_and_other_models_are_refused(keyed: Keyed) -> None:
    secret, _ = keyed.make_key(team="growth", max_n=1, models=["chat"])
    create = keyed.sdk(secret).chat.completions.create
    error = _refused(lambda: create(model="chat", messages=HELLO, n=4))
    assert (_error(error)["param"], _error(error)["code"]) == ("n", "n_not_allowed")
    error = _refused(lambda: create(model="claude", messages=HELLO))
    assert (_error(error)["param"], _error(error)["code"]) == ("model", "model_not_allowed")
    assert keyed.received() == []
    assert keyed.rows("1 = 1") == []
    assert [model.id for model in keyed.sdk(secret).models.list()] == ["chat"]
    # An unknown model's 404 lists the models this key may use, not every alias.
    error = _refused(lambda: create(model="nope", messages=HELLO), status=404)
    assert _error(error)["message"].endswith("(available: chat)")


def test_another_teams_task_is_refused_and_cannot_be_finished(keyed: Keyed) -> None:
    growth, growth_id = keyed.make_key(team="growth")
    billing, billing_id = keyed.make_key(team="billing")
    task = f"task-{uuid.uuid4().hex[:8]}"
    raw = keyed.sdk(growth).chat.completions.with_raw_response.create(
        model="chat", messages=HELLO, extra_headers={"X-Task-Id": task}
    )
    keyed.row(raw.headers["x-request-id"])
    create = keyed.sdk(billing).chat.completions.create
    error = _refused(
        lambda: create(model="chat", messages=HELLO, extra_headers={"X-Task-Id": task})
    )
    assert (_error(error)["param"], _error(error)["code"]) == ("x-task-id", "task_not_owned")
    metadata = {"metadata": {"task_id": task}}
    error = _refused(lambda: create(model="chat", messages=HELLO, extra_body=metadata))
    assert _error(error)["param"] == "metadata.task_id"
    assert len(keyed.received()) == 1  # the refusals never reached the upstream

    def finish(secret: str) -> httpx.Response:
        url = f"{keyed.url}/v1/tasks/{task}/finish"
        auth = {"Authorization": f"Bearer {secret}"}
        return httpx.post(url, json={"outcome": "success"}, headers=auth, timeout=30)

    refused = finish(billing)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "task_not_owned"
    assert finish(growth).status_code == 200
    _barrier(keyed, keyed.sdk(billing))
    rows = keyed.rows("task_id = ?", task)
    assert [(r["team"], r["caller"]) for r in rows] == [("growth", growth_id)]
    assert keyed.rows("caller = ?", billing_id)[0]["task_id"] != task


def test_a_task_finished_first_belongs_to_the_team_that_finished_it(keyed: Keyed) -> None:
    growth, _ = keyed.make_key(team="growth")
    billing, _ = keyed.make_key(team="billing")
    task = f"task-{uuid.uuid4().hex[:8]}"
    auth = {"Authorization": f"Bearer {growth}"}
    url = f"{keyed.url}/v1/tasks/{task}/finish"
    assert httpx.post(url, json={}, headers=auth, timeout=30).status_code == 200
    create = keyed.sdk(billing).chat.completions.create
    error = _refused(
        lambda: create(model="chat", messages=HELLO, extra_headers={"X-Task-Id": task})
    )
    assert _error(error)["code"] == "task_not_owned"


@pytest.mark.redis
def test_task_scoping_holds_across_replicas_on_redis(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    url = require_redis()
    config = _config(sim, tmp_path)
    first = Keyed(make_gateway(admin_key=ADMIN_KEY, config=config, redis_url=url), sim)
    second = Keyed(make_gateway(admin_key=ADMIN_KEY, config=config, redis_url=url), sim)
    growth, _ = first.make_key(team="growth")
    billing, _ = second.make_key(team="billing")  # another replica, another ledger
    task = f"task-{uuid.uuid4().hex}"
    headers = {"X-Task-Id": task}
    first.sdk(growth).chat.completions.create(model="chat", messages=HELLO, extra_headers=headers)
    create = second.sdk(billing).chat.completions.create
    error = _refused(lambda: create(model="chat", messages=HELLO, extra_headers=headers))
    assert _error(error)["code"] == "task_not_owned"
    finish = httpx.post(
        f"{second.url}/v1/tasks/{task}/finish",
        json={},
        headers={"Authorization": f"Bearer {billing}"},
        timeout=30,
    )
    assert finish.status_code == 403
    assert len(sim.requests()) == 1
    _barrier(second, second.sdk(billing))
    assert second.rows("task_id = ?", task) == []
