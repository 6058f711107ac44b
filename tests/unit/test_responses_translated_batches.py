"""A chat stream told as Responses events a read at a time (`TranslatedResponses`): every
chat event of one read at once, each Responses event with its object; the events before a
bad chunk still go out, then its error."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.errors import UpstreamProtocolError
from gateway.pipeline.event_relay import Relayed
from gateway.pipeline.responses_relay import TranslatedResponses
from gateway.upstream.responses_stream import ChatToResponses
from tests.chat_reads import Reads


def _chat(payload: dict[str, Any] | bytes) -> bytes:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return b"data: " + data + b"\n\n"


FIRST = _chat({"id": "c", "choices": [{"delta": {"content": "a"}}]})
SECOND = _chat({"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]})
USAGE = _chat({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})


def _translated(*reads: list[bytes]) -> TranslatedResponses:
    teller = ChatToResponses({"model": "chat"}, "resp_1", 0)
    return TranslatedResponses(FIRST, Reads(*reads), teller, "chat")


async def _all(events: TranslatedResponses) -> list[list[Relayed]]:
    batches = []
    while batch := await events.relayed_batch():
        batches.append(batch)
    return batches


def _kinds(batch: list[Relayed]) -> list[str]:
    return [str(told["type"]) for _, told in batch if told is not None]


def test_each_read_is_told_at_once_with_each_events_object() -> None:
    batches = asyncio.run(_all(_translated([SECOND, USAGE, _chat(b"[DONE]")])))
    first, rest = batches
    assert _kinds(first)[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in _kinds(first)  # the first chunk's text
    assert _kinds(rest)[-1] == "response.completed"
    for event, told in first + rest:  # each object is what its bytes hold
        assert orjson.loads(event.split(b"data: ", 1)[1]) == told
    completed = rest[-1][1]
    assert completed is not None and completed["response"]["usage"]["output_tokens"] == 2


def test_a_chat_stream_cut_before_done_tells_no_completion() -> None:
    batches = asyncio.run(_all(_translated([SECOND])))
    assert "response.completed" not in [kind for batch in batches for kind in _kinds(batch)]


def test_the_events_before_a_bad_chunk_go_out_then_its_error() -> None:
    events = _translated([SECOND, _chat(b"[1, 2]"), USAGE])

    async def run() -> tuple[list[Relayed], list[Relayed]]:
        first = await events.relayed_batch()
        before_the_error = await events.relayed_batch()
        with pytest.raises(UpstreamProtocolError, match="not an object"):
            await events.relayed_batch()
        return first, before_the_error

    first, before_the_error = asyncio.run(run())
    assert "response.output_text.delta" in _kinds(first)
    assert "response.output_text.delta" in _kinds(before_the_error)  # SECOND's "b"
