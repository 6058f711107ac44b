"""A task first named on /v1/messages, /v1/responses or /v1/completions is claimed there.

Each pipeline plans a request without shared state when it names no task
(`pipeline.plan`); a task named by the agent CLIs' session headers (Claude Code's
`x-claude-code-session-id`, Codex's `session-id`) or by `X-Task-Id` still has its claim
written by its first request, so another team's key is refused on it afterwards.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.e2e.test_key_spoofing import HELLO, Keyed, _error, _refused, keyed  # noqa: F401

FIRST_USES: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        "/v1/messages",
        {"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        "x-claude-code-session-id",
    ),
    ("/v1/responses", {"model": "chat", "input": "hi", "store": False}, "session-id"),
    ("/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 16}, "x-task-id"),
)


def test_a_task_first_named_on_each_endpoint_belongs_to_that_team(keyed: Keyed) -> None:  # noqa: F811
    growth, _ = keyed.make_key(team="growth")
    billing, _ = keyed.make_key(team="billing")
    create = keyed.sdk(billing).chat.completions.create
    for path, body, header in FIRST_USES:
        task = f"{path.rsplit('/', 1)[1]}-{uuid.uuid4().hex}"
        reply = httpx.post(
            f"{keyed.url}{path}",
            json=body,
            headers={"Authorization": f"Bearer {growth}", header: task},
            timeout=30,
        )
        assert reply.status_code == 200, (path, reply.text)
        assert reply.headers["x-task-id"] == task, path
        refused = _refused(
            lambda task=task: create(
                model="chat", messages=HELLO, extra_headers={"X-Task-Id": task}
            )
        )
        assert _error(refused)["code"] == "task_not_owned", path
        own = keyed.sdk(growth).chat.completions.with_raw_response.create(
            model="chat", messages=HELLO, extra_headers={"X-Task-Id": task}
        )
        assert own.headers["x-task-id"] == task, path
