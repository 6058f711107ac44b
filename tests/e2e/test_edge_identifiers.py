"""Task ids, steps, teams and projects are checked at the edge: a 400 naming the field.

Through the real openai SDK and a real gateway; nothing refused may reach the upstream
or the ledger.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import quote

import httpx
import openai
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway

MESSAGES = [{"role": "user", "content": "Say hello."}]
BAD_VALUES = {
    "nul": "task\x00one",
    "cr": "task\rone",
    "lf": "task\none",
    "tab": "task\tone",
    "del": "task\x7fone",
    "c1": "task\x85one",
    "too-long": "t" * 257,
}


def refused(client: openai.OpenAI, **options: Any) -> openai.BadRequestError:
    """Ask for a completion, expecting the gateway's 400."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="chat", messages=MESSAGES, **options)  # type: ignore[arg-type]
    error = caught.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    assert error.code == "invalid_identifier"
    return error


@pytest.mark.parametrize("field", ["task_id", "task_step"])
def test_bad_metadata_ids_are_refused_naming_the_field(
    gateway: Gateway, sim: SimControl, field: str
) -> None:
    client = gateway.sdk()
    for value in BAD_VALUES.values():
        error = refused(client, metadata={field: value})
        assert error.param == f"metadata.{field}"
    assert sim.requests() == []


HEADERS = ["X-Task-Id", "X-Task-Step", "X-Farebox-Team", "X-Farebox-Project", "X-Task-Step-Kind"]


def test_bad_header_ids_are_refused_naming_the_header(gateway: Gateway, sim: SimControl) -> None:
    # The SDK itself refuses to send NUL, CR or LF in a header (see the raw test below).
    for header in HEADERS:
        for kind in ("tab", "del", "too-long"):
            client = gateway.sdk(default_headers={header: BAD_VALUES[kind]})
            error = refused(client)
            assert error.param == header.lower()
    assert sim.requests() == []


def test_header_bytes_are_read_as_utf8_and_checked(gateway: Gateway, sim: SimControl) -> None:
    # The SDK sends only ASCII header values; other clients send UTF-8 bytes.
    for raw, says in [(b"\xff\xfe-task", "not valid UTF-8"), ("a\x85b".encode(), "U+0085")]:
        response = httpx.post(
            f"{gateway.base_url}/chat/completions",
            json={"model": "chat", "messages": MESSAGES},
            headers={"X-Task-Id": raw},
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "x-task-id" and says in error["message"]
    assert sim.requests() == []


def test_nul_cr_lf_in_a_header_never_reach_the_gateway(gateway: Gateway, sim: SimControl) -> None:
    client = gateway.sdk(default_headers={"X-Task-Id": "a\x00b"})
    with pytest.raises(openai.APIConnectionError):  # h11 refuses to send it
        client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    host, port = gateway.server.url.removeprefix("http://").split(":")
    body = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}'
    for value in (b"a\x00b", b"a\rb"):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                b"Content-Type: application/json\r\nX-Task-Id: " + value + b"\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            assert raw.recv(65536).startswith(b"HTTP/1.1 400 ")
    assert sim.requests() == []


@pytest.mark.parametrize("task", ["tâche-été", "タスク-1", "🚀-launch", "👩‍💻 pair run"])
def test_printable_unicode_ids_are_accepted_and_booked(
    gateway: Gateway, sim: SimControl, task: str
) -> None:
    client = gateway.sdk()
    reply = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        metadata={"task_id": task, "task_step": "plan ✓"},
    )
    assert reply.parse().choices[0].message.content
    assert reply.status_code == 200 and len(sim.requests()) == 1
    # The same id through a header, as the UTF-8 bytes a client sends.
    response = httpx.post(
        f"{gateway.base_url}/chat/completions",
        json={"model": "chat", "messages": MESSAGES},
        headers={"X-Task-Id": task.encode()},
    )
    assert response.status_code == 200
    booked = httpx.get(f"{gateway.base_url}/tasks/{quote(task)}")
    assert booked.status_code == 200
    body = booked.json()
    assert body["task_id"] == task and body["request_count"] == 2
    assert body["requests"][0]["task_step"] == "plan ✓"


def test_the_tasks_endpoints_check_the_task_id(gateway: Gateway) -> None:
    for value in BAD_VALUES.values():
        path = quote(value, safe="")
        url = f"{gateway.base_url}/tasks/{path}"
        for response in (httpx.post(f"{url}/finish", json={"outcome": "done"}), httpx.get(url)):
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["param"] == "task_id" and error["type"] == "invalid_request_error"


def test_the_finish_outcome_is_checked(gateway: Gateway) -> None:
    response = httpx.post(f"{gateway.base_url}/tasks/t-1/finish", json={"outcome": "ok\x00"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "outcome"
