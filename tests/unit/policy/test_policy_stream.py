"""Thinking budgets enforced on the stream: when, and the continuation request."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.policy import continuation_request, needs_stream_enforcement
from tests.unit.policy.helpers import Planner, user_body


@pytest.mark.parametrize(
    ("family", "supports", "expected"),
    [
        ("vllm", False, True),
        ("vllm", True, False),
        ("sglang", False, True),
        ("sglang", True, False),
        ("openai", False, False),
        ("anthropic", False, False),
        ("other", False, False),
    ],
)
def test_needs_stream_enforcement(family: str, supports: bool, expected: bool) -> None:
    assert needs_stream_enforcement(family, supports) is expected  # type: ignore[arg-type]


def test_decision_says_whether_the_stream_must_be_cut(make_plan: Planner) -> None:
    policy = {"defaults": {"thinking_budget": 300}}
    caps = {"supports_continue_final_message": True}
    decision = make_plan(policy, user_body(), "vllm", caps)
    assert decision.stream_enforcement and decision.can_continue
    assert decision.thinking_budget == 300
    assert not make_plan({}, user_body(), "vllm").stream_enforcement  # no budget, nothing to cut


def test_continuation_request_closes_the_thinking() -> None:
    body = {
        "model": "sim-thinker",
        "messages": [{"role": "user", "content": "2+2?"}],
        "max_tokens": 1000,
        "thinking_token_budget": 50,
        "stream": True,
    }
    follow_up = continuation_request(body, "Adding two and two.\n", reasoning_tokens=50)
    assert follow_up["messages"] == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nAdding two and two.\n</think>\n\n"},
    ]
    assert follow_up["continue_final_message"] is True
    assert follow_up["add_generation_prompt"] is False
    assert follow_up["max_tokens"] == 950
    assert "thinking_token_budget" not in follow_up
    assert follow_up["stream"] is True and follow_up["model"] == "sim-thinker"
    assert body["messages"] == [{"role": "user", "content": "2+2?"}], "the input is not changed"


def test_continuation_request_markers_and_caps() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "max_completion_tokens": 10}
    follow_up = continuation_request(
        body, "<seed:think>plan", "</seed:think>", reasoning_tokens=40, start_marker="<seed:think>"
    )
    assert follow_up["messages"][-1]["content"] == "<seed:think>\nplan\n</seed:think>\n\n"
    assert follow_up["max_completion_tokens"] == 1
    assert "max_tokens" not in follow_up


def test_continuation_of_a_prefilled_assistant_message() -> None:
    body: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "<think>\nfirst"},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    follow_up = continuation_request(body, " then second")
    assert follow_up["messages"][-1] == {
        "role": "assistant",
        "content": "<think>\nfirst\n then second\n</think>\n\n",
    }
    assert len(follow_up["messages"]) == 2
    assert body["messages"][-1]["content"] == "<think>\nfirst"
