"""Stored responses through the real `openai` SDK: retrieve, input_items.list, delete.

`client.responses.retrieve`, `client.responses.input_items.list` and
`client.responses.delete` against the gateway's own store, for a `wire: responses` route
and a translated one, on the in-process state and on Redis (two replicas). A deleted
response is a 404 and can no longer be continued; `store: false` keeps nothing; another
team's key gets the 404 an unknown id gets; the store's time is FAREBOX_RESPONSES_TTL_S.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from gateway.settings import RedisLimits
from gateway.state.fallback import FallbackState
from gateway.state.memory import MemoryState
from gateway.state.responses import ResponseStore, StoredResponse
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.test_responses import CONFIG, INSTRUCTIONS
from tests.redis_service import require_redis

ADMIN_KEY = "adm-stored-0123456789abcdef"


def _config(sim: SimControl, tmp_path: Path) -> Path:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return config


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    return make_gateway(config=_config(sim, tmp_path))


@pytest.mark.parametrize("alias", ["native", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_retrieve_list_and_delete_with_the_sdk(
    gateway: Gateway, sim: SimControl, alias: str, stream: bool
) -> None:
    client = gateway.sdk()
    first = client.responses.create(model=alias, instructions=INSTRUCTIONS, input="One.")
    if stream:
        with client.responses.stream(
            model=alias, input="Two.", previous_response_id=first.id
        ) as events:
            second = events.get_final_response()
    else:
        second = client.responses.create(model=alias, input="Two.", previous_response_id=first.id)
    calls = len(sim.requests())

    got = client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text
    assert got.previous_response_id == first.id and got.usage == second.usage
    listed = client.responses.input_items.list(second.id, order="asc")
    kinds = [(item.type, getattr(item, "role", None)) for item in listed.data]
    # The chain's earlier turn is part of the input (instructions are not an item).
    assert kinds == [("message", "user"), ("message", "assistant"), ("message", "user")]
    assert [item.id for item in listed.data][::-1] == [
        item.id
        for item in client.responses.input_items.list(second.id).data  # desc default
    ]
    page = client.responses.input_items.list(second.id, order="asc", limit=2)
    assert len(page.data) == 2 and page.has_more and page.last_id == listed.data[1].id
    rest = client.responses.input_items.list(second.id, order="asc", after=page.last_id)
    assert [item.id for item in rest.data] == [listed.data[2].id] and not rest.has_more

    assert client.responses.delete(second.id) is None  # the SDK reads no body
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(second.id)
    assert gone.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(second.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=alias, input="Three.", previous_response_id=second.id)
    assert refused.value.code == "previous_response_not_found"
    assert len(sim.requests()) == calls  # reads and deletes never reach the upstream
    assert client.responses.retrieve(first.id).id == first.id  # only the one deleted


def test_the_delete_answer_is_openais(gateway: Gateway) -> None:
    made = gateway.sdk().responses.create(model="chat", input="Hi.")
    url = f"{gateway.base_url}/responses/{made.id}"
    headers = {"Authorization": "Bearer sk-client-key"}
    answer = httpx.delete(url, headers=headers, timeout=10)
    assert answer.status_code == 200
    assert answer.json() == {"id": made.id, "object": "response", "deleted": True}
    missing = httpx.get(url, headers=headers, timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": f"Response with id '{made.id}' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": "response_not_found",
    }
    streamed = httpx.get(url, params={"stream": "true"}, headers=headers, timeout=10)
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "stream"
    bad = httpx.get(f"{url}/input_items", params={"limit": 0}, headers=headers, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_store_false_and_another_caller_find_nothing(gateway: Gateway) -> None:
    client = gateway.sdk(api_key="sk-alice")
    unkept = client.responses.create(model="native", input="Forget me.", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)
    kept = client.responses.create(model="native", input="Mine.")
    other = gateway.sdk(api_key="sk-mallory")  # open mode: scoped by the bearer token
    for call in (
        other.responses.retrieve,
        other.responses.delete,
        other.responses.input_items.list,
    ):
        with pytest.raises(openai.NotFoundError):
            call(kept.id)
    assert client.responses.retrieve(kept.id).output_text == kept.output_text  # still there


def test_another_teams_key_gets_404_and_the_team_reads_its_own(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    gateway = make_gateway(config=_config(sim, tmp_path), admin_key=ADMIN_KEY)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}

    def key(team: str) -> openai.OpenAI:
        made = httpx.post(
            f"{gateway.server.url}/admin/keys", json={"team": team}, headers=admin, timeout=10
        )
        assert made.status_code == 201, made.text
        return gateway.sdk(api_key=made.json()["key"])

    alpha, alpha_too, beta = key("alpha"), key("alpha"), key("beta")
    made = alpha.responses.create(model="chat", input="Alpha's plan.")
    for call in (beta.responses.retrieve, beta.responses.delete, beta.responses.input_items.list):
        with pytest.raises(openai.NotFoundError):
            call(made.id)
    with pytest.raises(openai.BadRequestError):
        beta.responses.create(model="chat", input="Go on.", previous_response_id=made.id)
    assert alpha_too.responses.retrieve(made.id).id == made.id  # a team's, like its tasks
    alpha_too.responses.create(model="chat", input="Go on.", previous_response_id=made.id)
    with pytest.raises(openai.PermissionDeniedError):  # model routes take no admin key
        gateway.sdk(api_key=ADMIN_KEY).responses.retrieve(made.id)


def test_kept_for_the_configured_time(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    gateway = make_gateway(config=_config(sim, tmp_path), responses_ttl_s=1.0)
    client = gateway.sdk()
    made = client.responses.create(model="chat", input="Short-lived.")
    assert client.responses.retrieve(made.id).id == made.id
    time.sleep(1.2)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


def test_two_replicas_share_reads_and_deletes_through_redis(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    url = require_redis()
    config = _config(sim, tmp_path)
    first = make_gateway(config=config, redis_url=url)
    second = make_gateway(config=config, redis_url=url)
    made = first.sdk().responses.create(model="native", input="Kept in Redis.")
    assert second.sdk().responses.retrieve(made.id).output_text == made.output_text
    assert len(second.sdk().responses.input_items.list(made.id).data) == 1
    second.sdk().responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        first.sdk().responses.retrieve(made.id)
    with pytest.raises(openai.BadRequestError):
        first.sdk().responses.create(model="native", input="More.", previous_response_id=made.id)


async def test_the_store_deletes_on_memory_and_on_redis() -> None:
    url = require_redis()
    redis = await FallbackState.connect(url, f"test-stored-{time.time_ns()}", RedisLimits())
    try:
        for state in (MemoryState(), redis):
            store = ResponseStore(state, ttl_s=60)
            kept = StoredResponse(
                [{"role": "user", "content": "hi"}, {"type": "message", "role": "assistant"}],
                "task-1",
                "key-abc",
                "team:alpha",
                {"id": "resp_1", "object": "response"},
                1,
            )
            await store.save("resp_1", kept)
            loaded = await store.load("resp_1")
            assert loaded == kept and loaded.input_items == kept.items[:1]
            assert loaded.readable_by("team:alpha", None)
            assert not loaded.readable_by("team:beta", "key-abc")
            assert await store.delete("resp_1") is True
            assert await store.load("resp_1") is None
            assert await store.delete("resp_1") is False
    finally:
        await redis.aclose()


def test_the_doc_example_runs(make_gateway: GatewayFactory, tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocols.md").read_text()
    block = re.search(r"### Stored responses.*?```python\n(.*?)```", doc, re.S)
    assert block, "docs/protocols.md has no stored-responses example"
    gateway = make_gateway()  # the test routes, `sim-chat` among them
    script = tmp_path / "example.py"
    script.write_text(block.group(1).replace("http://127.0.0.1:4000", gateway.server.url))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-4:] == [
        "message user",
        "message assistant",
        "message user",
        "deleted: response_not_found",
    ]
