"""Who is to blame: the breaker counts only the upstream's failures, rows say what happened.

A request litellm refuses before sending is the client's 400 and never opens the shared
circuit; an upstream's own 5xx still does. A retry that succeeds books a clean row. No
header value, whatever its source, keeps a paid-for reply from reaching the client.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.hostile_upstream import ask, hostile_upstream

ASK = [{"role": "user", "content": "Find invoice 7."}]


def _post(gateway: Gateway, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions", json=body, headers=headers, timeout=60
    )


def _sent(sim: SimControl) -> list[dict[str, Any]]:
    return [json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests()]


# Requests litellm cannot translate for Anthropic; each fails inside litellm, unsent.
REFUSED_BY_LITELLM = [
    ({"response_format": 5}, "response_format"),
    ({"response_format": "json"}, "response_format"),
    ({"tool_choice": 5}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, None),
]


def test_requests_litellm_refuses_are_400s_and_never_open_the_circuit(
    gateway: Gateway, sim: SimControl
) -> None:
    for _ in range(2):  # 8 refusals: more than the breaker's threshold of 5
        for fields, param in REFUSED_BY_LITELLM:
            response = _post(gateway, {"model": "claude", "messages": ASK, **fields})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error", error
            assert error["code"] is None and "claude" in error["message"]
            if param is not None:
                assert error["param"] == param
            assert "Traceback" not in error["message"]
    assert sim.requests() == []  # none of them reached the upstream
    ok = _post(gateway, {"model": "claude", "messages": ASK})
    assert ok.status_code == 200, ok.text

    # The upstream's own failures still open it: five 500s, then the circuit is open.
    sim.fault(match={"path": "/v1/messages"}, status=500, count=5)
    for _ in range(5):
        assert _post(gateway, {"model": "claude", "messages": ASK}).status_code == 500
    blocked = _post(gateway, {"model": "claude", "messages": ASK})
    assert blocked.status_code == 503 and blocked.json()["error"]["code"] == "circuit_open"
    assert len(sim.requests()) == 1 + 5


RETRY_CONFIG = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
routing:
  chat:
    retry: {{attempts: 1, base_s: 0.01, max_s: 0.01}}
"""


@pytest.mark.parametrize("stream", [False, True])
def test_a_retry_that_succeeds_books_a_row_without_the_first_error(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path, stream: bool
) -> None:
    config = tmp_path / "retry.yaml"
    config.write_text(RETRY_CONFIG.format(sim=sim.url))
    gateway = make_gateway(config=config)
    sim.fault(match={"model": "sim-chat"}, status=503, count=1)
    response = _post(
        gateway, {"model": "chat", "messages": ASK, "stream": stream}, **{"X-Task-Id": "t-retry"}
    )
    assert response.status_code == 200, response.text
    assert len(sim.requests()) == 2
    task = httpx.get(f"{gateway.base_url}/tasks/t-retry", timeout=30).json()
    rows = sorted(task["requests"], key=lambda row: row["attempt"])
    assert [(r["attempt"], r["status_code"], r["error_type"]) for r in rows] == [
        (0, 503, "upstream_error"),
        (1, 200, None),
    ]


RULE_CONFIG = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
rules:
  - name: "fast lane \U0001f680 \\r\\nX-Injected: 1 "
    match: {{model: chat}}
"""


@pytest.mark.parametrize("stream", [False, True])
def test_header_values_that_http_cannot_carry_are_encoded_not_fatal(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path, stream: bool
) -> None:
    config = tmp_path / "rules.yaml"
    config.write_text(RULE_CONFIG.format(sim=sim.url), encoding="utf-8")
    gateway = make_gateway(config=config)
    response = _post(gateway, {"model": "chat", "messages": ASK, "stream": stream})
    assert response.status_code == 200, response.text
    rule = response.headers["x-farebox-rule"]
    assert rule.isascii() and rule.isprintable() and rule == rule.strip()
    assert unquote(rule) == "fast lane \U0001f680 \r\nX-Injected: 1 "  # lossless
    assert "x-injected" not in response.headers
    assert gateway.last().status_code == 200

    # A task id from the body may hold anything JSON can: refused at the edge, or sent
    # back encoded; never a 500, a dropped connection, or a call without a row.
    body = {"model": "chat", "messages": ASK, "stream": stream}
    body["metadata"] = {"task_id": "t-\U0001f680\r\n\x00"}
    response = _post(gateway, body)
    assert response.status_code in (200, 400), response.text
    if response.status_code == 200:
        task = response.headers["x-task-id"]
        assert unquote(task) == "t-\U0001f680\r\n\x00"
        assert gateway.last(2).status_code == 200


HOSTILE_CLAUDE = """
models:
  claude: {{provider: anthropic, model: claude-x, base_url: "{url}", api_key_env: HOSTILE_KEY}}
routing:
  claude: {{retry: {{attempts: 0}}}}
"""


def test_a_reply_litellm_cannot_read_is_a_bad_reply_with_one_row(
    make_gateway: GatewayFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_KEY", "sk-ant-hostile-0123456789")
    with hostile_upstream() as upstream:
        config = tmp_path / "claude.yaml"
        config.write_text(HOSTILE_CLAUDE.format(url=upstream.base_url.removesuffix("/v1")))
        gateway = make_gateway(config=config)
        for number, scenario in enumerate(("text", "truncated", "array"), start=1):
            body = {"model": "claude", "messages": ask(scenario)}
            response = _post(gateway, body, **{"X-Task-Id": f"t-claude-{scenario}"})
            assert response.status_code == 502, response.text
            assert response.json()["error"]["code"] == "upstream_bad_reply"
            assert "sk-ant-hostile" not in response.text
            assert len(upstream.calls) == number  # one call each, and it was sent
            task = httpx.get(f"{gateway.base_url}/tasks/t-claude-{scenario}", timeout=30).json()
            (row,) = task["requests"]
            assert (row["status_code"], row["error_type"]) == (502, "upstream_bad_reply")
