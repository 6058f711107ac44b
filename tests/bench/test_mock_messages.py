"""bench/hotpath_mock.py's Anthropic wire is what the anthropic SDK reads, and it refuses
what Anthropic refuses: a bench of the native Messages path measures a real exchange."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.anthropic_mock import answered, running_mock


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with running_mock() as base:
        yield base


def _client(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="sk-ant-bench", max_retries=0)


def test_a_whole_reply_is_an_sdk_message(mock: str) -> None:
    before = answered(mock)
    with _client(mock) as client:  # closed: no socket left to the collector
        message = client.messages.create(
            model="claude-mock",
            max_tokens=64,
            system="Be brief.",
            messages=[{"role": "user", "content": "Say hello to the whole world."}],
        )
    assert message.type == "message" and message.model == "claude-mock"
    assert message.stop_reason == "end_turn"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "".join(f" tok{i}" for i in range(16))
    assert message.usage.output_tokens == 16
    assert message.usage.input_tokens == (len("Say hello to the whole world.") + 9) // 4
    assert message.usage.cache_read_input_tokens == 0
    assert answered(mock) == before + 1


def test_a_stream_is_read_by_the_sdk_to_its_final_message(mock: str) -> None:
    with (
        _client(mock) as client,
        client.messages.stream(
            model="claude-mock", max_tokens=64, messages=[{"role": "user", "content": "Hi there"}]
        ) as stream,
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("text") == 16  # the SDK's own event per text delta
    assert final.content[0].text == "".join(f" tok{i}" for i in range(16))
    assert final.usage.output_tokens == 16 and final.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "body",
    [
        {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},  # no model
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},  # no max_tokens
        {"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]},
        {"model": "m", "max_tokens": True, "messages": [{"role": "user", "content": "x"}]},
        {"model": "m", "max_tokens": 8, "messages": []},
        {"model": "m", "max_tokens": 8},
    ],
)
def test_what_anthropic_refuses_is_refused_in_its_error_shape(mock: str, body: object) -> None:
    before = answered(mock)
    reply = httpx.post(f"{mock}/v1/messages", json=body, timeout=5)
    assert reply.status_code == 400
    error = reply.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    assert answered(mock) == before  # a refusal is not an answered request


def test_a_body_that_is_not_json_is_refused(mock: str) -> None:
    reply = httpx.post(f"{mock}/v1/messages", content=b"{not json", timeout=5)
    assert reply.status_code == 400 and reply.json()["type"] == "error"
