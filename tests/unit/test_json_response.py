"""The whole reply's response, its head built directly: what Starlette's `Response` sends.

For any status and set of headers, `json_response` sends the same start message (status,
raw headers in the same order) and the same body as `Response(..., media_type=
"application/json")`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from starlette.responses import Response
from starlette.types import Message

from gateway.http_headers import safe_headers
from gateway.pipeline.chat import json_response

_NAMES = st.sampled_from(
    ["x-request-id", "x-task-id", "x-farebox-tier", "X-Farebox-Rule", "content-type",
     "content-length", "retry-after", "x-farebox-cost-usd"]
)  # fmt: skip
_VALUES = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=12)


async def _sent(response: Response) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def receive() -> Message:  # pragma: no cover - never called
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        messages.append(dict(message))

    await response({"type": "http"}, receive, send)
    return messages


@given(
    body=st.binary(max_size=64),
    status=st.sampled_from([200, 201, 204, 304, 400, 429, 500, 502, 101]),
    headers=st.dictionaries(_NAMES, _VALUES, max_size=6),
)
async def test_the_same_messages_as_starlettes_response(
    body: bytes, status: int, headers: dict[str, str]
) -> None:
    ours = json_response(body, status, dict(headers))
    theirs = Response(body, status_code=status, media_type="application/json", headers=headers)
    assert await _sent(ours) == await _sent(theirs)
    assert ours.raw_headers == theirs.raw_headers and ours.media_type == theirs.media_type


@given(
    body=st.binary(max_size=64),
    status=st.sampled_from([200, 201, 204, 400, 502]),
    headers=st.dictionaries(_NAMES, st.text(max_size=12), max_size=8),
)
async def test_sendable_values_the_same_messages_as_starlettes_response(
    body: bytes, status: int, headers: dict[str, str]
) -> None:
    """`sendable=True` (values through `safe_headers`, as the chat path's reply sends them):
    encoded without naming the codec, the same bytes as Starlette's Latin-1."""
    safe = safe_headers(headers)
    ours = json_response(body, status, dict(safe), sendable=True)
    theirs = Response(body, status_code=status, media_type="application/json", headers=safe)
    assert await _sent(ours) == await _sent(theirs)
    assert ours.raw_headers == theirs.raw_headers


async def test_a_usual_reply() -> None:
    headers = {"x-request-id": "req-1", "x-farebox-tier": "standard"}
    sent = await _sent(json_response(b'{"id":"x"}', 200, headers))
    assert sent[0] == {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"x-request-id", b"req-1"),
            (b"x-farebox-tier", b"standard"),
            (b"content-length", b"10"),
            (b"content-type", b"application/json"),
        ],
    }
    assert sent[1] == {"type": "http.response.body", "body": b'{"id":"x"}'}
