"""A hostile upstream: every reply it mangles ends cleanly, leaves one row, breaks nothing.

For each misbehaviour the client (the official SDK, and raw httpx for the SSE bytes) gets
an OpenAI-shaped error or a stream ending in an error event and `[DONE]`; the ledger
holds exactly one row per upstream call, with the status and error type; and the same
gateway serves the next request.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from tests.hostile_upstream import ANSWER, USAGE, HostileUpstream, ask, hostile_upstream
from tests.servers import ServerThread

GPU = {
    "cost_per_hour": "3.60",
    "prefill_tokens_per_second": 10000,
    "decode_tokens_per_second": 1000,
}


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileUpstream]:
    with hostile_upstream() as server:
        yield server


class Gateway:
    """One gateway for the module, in front of the hostile upstream, with its ledger."""

    def __init__(self, hostile: HostileUpstream, data_dir: Path):
        route = {"provider": "openai", "base_url": hostile.base_url}
        config = GatewayConfig.model_validate(
            {
                "models": {
                    "hostile": {**route, "model": "hostile"},
                    "fragile": {**route, "model": "hostile-fragile"},
                },
                "prices": {"hostile": {"gpu": GPU}},
                "routing": {
                    # One call per request, and a breaker that the many failures here
                    # do not open, except on `fragile`, where opening it is the test.
                    "hostile": {"retry": {"attempts": 0}, "breaker": {"failures": 1000}},
                    "fragile": {"retry": {"attempts": 0}, "breaker": {"failures": 2}},
                },
            }
        )
        self.seen: list[RequestContext] = []
        self.settings = Settings(data_dir=data_dir)
        app = create_app(self.settings, config, observers=[self.seen.append])
        self.server = ServerThread(app).start()
        self.url = f"{self.server.url}/v1"
        self.sdk = openai.OpenAI(base_url=self.url, api_key="sk-client", max_retries=0)

    def rows(self, task: str, count: int = 1) -> list[dict[str, Any]]:
        """The ledger rows of `task`, once at least `count` are committed."""
        deadline = time.monotonic() + 15
        while True:
            rows = self._query(task)
            if len(rows) >= count or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)

    def _query(self, task: str) -> list[dict[str, Any]]:
        path = self.settings.data_dir / "farebox.db"
        if not path.exists():
            return []
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            try:
                found = db.execute(
                    "SELECT * FROM requests WHERE task_id = ? ORDER BY attempt", (task,)
                )
            except sqlite3.OperationalError:  # the table is not created yet
                return []
            return [dict(row) for row in found.fetchall()]

    def stop(self) -> None:
        self.sdk.close()
        self.server.stop()


@pytest.fixture(scope="module")
def gateway(
    hostile: HostileUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    with pytest.MonkeyPatch.context() as patch:  # no developer FAREBOX_* setting leaks in
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)
        server = Gateway(hostile, tmp_path_factory.mktemp("hostile-gateway"))
    yield server
    server.stop()


def _task(name: str) -> dict[str, str]:
    return {"X-Task-Id": f"hostile-{name}-{time.monotonic_ns()}"}


def _one_row(
    gateway: Gateway, hostile: HostileUpstream, scenario: str, before: int, task: str
) -> dict[str, Any]:
    """The single row of a single upstream call."""
    assert hostile.count(scenario) == before + 1, "exactly one call reached the upstream"
    rows = gateway.rows(task)
    assert len(rows) == 1, rows
    return rows[0]


def _still_serves(gateway: Gateway) -> None:
    reply = gateway.sdk.chat.completions.create(model="hostile", messages=ask("ok"))  # type: ignore[arg-type]
    assert reply.choices[0].message.content == ANSWER
    stream = gateway.sdk.chat.completions.create(model="hostile", messages=ask("ok"), stream=True)  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == ANSWER


WHOLE_FAILURES = {
    # scenario: (status, code), the code also the row's error_type
    "text": (502, "upstream_bad_reply"),
    "array": (502, "upstream_bad_reply"),
    "truncated": (502, "upstream_bad_reply"),
    "empty": (502, "upstream_bad_reply"),
    "no-choices": (502, "upstream_bad_reply"),
    "message-string": (502, "upstream_bad_reply"),
    "usage-string": (502, "upstream_bad_reply"),
    "bad-gzip": (502, "upstream_bad_reply"),
    "gzip-bomb": (502, "upstream_bad_reply"),
    "reset-before-body": (502, "upstream_unreachable"),
    "reset-mid-body": (502, "upstream_unreachable"),
}


@pytest.mark.parametrize("scenario", sorted(WHOLE_FAILURES))
def test_unreadable_whole_reply_is_a_502_with_one_row(
    gateway: Gateway, hostile: HostileUpstream, scenario: str
) -> None:
    status, code = WHOLE_FAILURES[scenario]
    headers, before = _task(scenario), hostile.count(scenario)
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.sdk.chat.completions.create(
            model="hostile",
            messages=ask(scenario),  # type: ignore[arg-type]
            extra_headers=headers,
        )
    assert caught.value.status_code == status
    error = caught.value.response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and "hostile" in error["message"]
    row = _one_row(gateway, hostile, scenario, before, headers["X-Task-Id"])
    assert (row["status_code"], row["error_type"]) == (status, code)
    assert row["prompt_tokens"] == row["completion_tokens"] == 0  # nothing readable to bill
    _still_serves(gateway)


STREAM_FAILURES = {
    "delta-string": "upstream_bad_reply",
    "choices-object": "upstream_bad_reply",
    "choice-string": "upstream_bad_reply",
    "usage-string": "upstream_bad_reply",
    "not-json": "upstream_bad_reply",
    "array-event": "upstream_bad_reply",
    "first-not-json": "upstream_bad_reply",
    "bad-gzip": "upstream_bad_reply",
    "endless": "upstream_bad_reply",
    "no-done": "upstream_unreachable",
    "reset-before-body": "upstream_unreachable",
    "reset-mid-body": "upstream_unreachable",
}


def _post_stream(gateway: Gateway, scenario: str, headers: dict[str, str]) -> httpx.Response:
    body = {"model": "hostile", "messages": ask(scenario), "stream": True}
    return httpx.post(f"{gateway.url}/chat/completions", json=body, headers=headers, timeout=60)


def _clean_ending(response: httpx.Response, code: str) -> None:
    """An error before the first byte (JSON), or a stream that ends in an error and [DONE]."""
    if response.status_code != 200:
        assert response.status_code == 502, response.text
        assert response.json()["error"]["code"] == code
        return
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]", events[-3:]
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["code"] == code and set(error) == {"message", "type", "param", "code"}
    for event in events[:-1]:  # every event the client got is a JSON object
        assert isinstance(json.loads(event.removeprefix("data: ")), dict), event


@pytest.mark.parametrize("scenario", sorted(STREAM_FAILURES))
def test_malformed_stream_ends_with_an_error_event_and_one_row(
    gateway: Gateway, hostile: HostileUpstream, scenario: str
) -> None:
    code = STREAM_FAILURES[scenario]
    headers, before = _task(scenario), hostile.count(scenario)
    _clean_ending(_post_stream(gateway, scenario, headers), code)
    row = _one_row(gateway, hostile, scenario, before, headers["X-Task-Id"])
    assert (row["status_code"], row["error_type"], row["streamed"]) == (502, code, 1)

    # The SDK sees the same failure as an error, whether it came before or mid-stream.
    headers, before = _task(scenario), hostile.count(scenario)
    with pytest.raises(openai.APIError):
        stream = gateway.sdk.chat.completions.create(
            model="hostile",
            messages=ask(scenario),  # type: ignore[arg-type]
            stream=True,
            extra_headers=headers,
        )
        for _ in stream:
            pass
    assert _one_row(gateway, hostile, scenario, before, headers["X-Task-Id"])["status_code"] == 502
    _still_serves(gateway)


def test_an_error_event_mid_stream_is_the_rows_error(
    gateway: Gateway, hostile: HostileUpstream
) -> None:
    headers, before = _task("error-event"), hostile.count("error-event")
    response = _post_stream(gateway, "error-event", headers)
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]" and len(events) == 3  # role, error, [DONE]
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["type"] == "server_error" and "model overloaded" in error["message"]
    row = _one_row(gateway, hostile, "error-event", before, headers["X-Task-Id"])
    assert (row["status_code"], row["error_type"]) == (503, "server_error")


def test_a_stream_cut_mid_way_is_billed_as_estimated(
    gateway: Gateway, hostile: HostileUpstream
) -> None:
    headers, before = _task("cut"), hostile.count("reset-mid-body")
    _clean_ending(_post_stream(gateway, "reset-mid-body", headers), "upstream_unreachable")
    row = _one_row(gateway, hostile, "reset-mid-body", before, headers["X-Task-Id"])
    assert row["estimated"] == 1 and row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
    assert row["cost_total"] > 0


def test_a_client_gone_before_the_stream_started_leaves_one_row_and_no_upstream(
    gateway: Gateway, hostile: HostileUpstream
) -> None:
    headers, before, hangups = _task("gone"), hostile.count("slow"), hostile.hangups
    body = {"model": "hostile", "messages": ask("slow"), "stream": True}
    with pytest.raises(httpx.ReadTimeout):  # gone before the first event, at 0.5 s
        httpx.post(
            f"{gateway.url}/chat/completions",
            json=body,
            headers=headers,
            timeout=httpx.Timeout(10, read=0.2),
        )
    row = _one_row(gateway, hostile, "slow", before, headers["X-Task-Id"])
    assert (row["status_code"], row["error_type"]) == (499, "client_disconnected")
    deadline = time.monotonic() + 10
    while hostile.hangups == hangups and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hostile.hangups > hangups, "the gateway left the upstream stream open"


def test_gzip_replies_are_decoded_whole_and_streamed(
    gateway: Gateway, hostile: HostileUpstream
) -> None:
    headers = _task("gzip")
    reply = gateway.sdk.chat.completions.create(
        model="hostile",
        messages=ask("gzip"),  # type: ignore[arg-type]
        extra_headers=headers,
    )
    assert reply.choices[0].message.content == ANSWER
    assert reply.usage is not None and reply.usage.prompt_tokens == USAGE["prompt_tokens"]
    raw = _post_stream(gateway, "gzip", headers)
    assert raw.status_code == 200 and "content-encoding" not in raw.headers
    events = [e for e in raw.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    text = "".join(
        choice["delta"].get("content") or ""
        for event in events[:-1]
        for choice in json.loads(event.removeprefix("data: "))["choices"]
    )
    assert text == ANSWER
    whole, streamed = [call for call in hostile.calls if call.scenario == "gzip"][-2:]
    assert "gzip" in whole.headers["accept-encoding"]  # big JSON may come compressed
    assert streamed.headers["accept-encoding"] == "identity"  # SSE should not be
    rows = gateway.rows(headers["X-Task-Id"], 2)
    assert [(r["status_code"], r["error_type"], r["prompt_tokens"]) for r in rows] == [
        (200, None, USAGE["prompt_tokens"])
    ] * 2


@pytest.mark.parametrize("stream", [False, True])
def test_nonsense_usage_still_completes_with_a_row(
    gateway: Gateway, hostile: HostileUpstream, stream: bool
) -> None:
    headers, before = _task("usage"), hostile.count("nonsense-usage")
    body = {"model": "hostile", "messages": ask("nonsense-usage"), "stream": stream}
    response = httpx.post(f"{gateway.url}/chat/completions", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    if stream:
        assert response.text.rstrip().endswith("data: [DONE]")
    row = _one_row(gateway, hostile, "nonsense-usage", before, headers["X-Task-Id"])
    assert row["status_code"] == 200 and row["error_type"] is None
    assert row["completion_tokens"] >= 0 and row["prompt_tokens"] >= 0


def test_bad_replies_count_against_the_breaker(gateway: Gateway, hostile: HostileUpstream) -> None:
    body = {"model": "fragile", "messages": ask("text")}
    for _ in range(2):
        response = httpx.post(f"{gateway.url}/chat/completions", json=body, timeout=30)
        assert response.json()["error"]["code"] == "upstream_bad_reply"
    before = hostile.count("text")
    blocked = httpx.post(f"{gateway.url}/chat/completions", json=body, timeout=30)
    assert blocked.status_code == 503 and blocked.json()["error"]["code"] == "circuit_open"
    assert hostile.count("text") == before  # the open circuit sent nothing


def test_many_bad_streams_leave_the_gateway_healthy(
    gateway: Gateway, hostile: HostileUpstream
) -> None:
    for scenario in ("endless", "not-json", "reset-mid-body"):
        _post_stream(gateway, scenario, _task(scenario))
    health = httpx.get(f"{gateway.server.url}/healthz", timeout=30)
    assert health.status_code == 200
    _still_serves(gateway)
