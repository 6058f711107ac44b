"""Anthropic's Messages API on perf-floor's instant mock: what bench/hotpath_mock.py serves
at `POST /v1/messages`, so the native Messages path (Claude Code's) is measured served.

The reply is the chat route's, in Anthropic's wire (docs.anthropic.com, Messages and
Streaming Messages): `--tokens` tokens (" tok0 tok1 ..."), answered at once, a stream
written whole (`message_start`, one `content_block_start`, `ping`, a `text_delta` per
token, `content_block_stop`, `message_delta` with the stop reason and output tokens,
`message_stop`). A request without `model`, `max_tokens` (a positive integer) or
`messages` (a non-empty list) is refused with 400 in Anthropic's error shape, as the API
refuses it.
"""

from __future__ import annotations

from typing import Any

import mock_upstream


def refusal(req: Any) -> str | None:
    """Why Anthropic would refuse `req` with 400, or None."""
    if not isinstance(req, dict):
        return "the body must be a JSON object"
    if not isinstance(req.get("model"), str):
        return "model: Field required"
    tokens = req.get("max_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        return "max_tokens: Field required (an integer, at least 1)"
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    return None


def error_body(message: str) -> bytes:
    """Anthropic's error shape."""
    error = {"type": "invalid_request_error", "message": message}
    return mock_upstream.dumps({"type": "error", "error": error})


def input_tokens(req: dict[str, Any]) -> int:
    """The mock's crude count (~4 characters a token), over the system prompt too."""
    system = req.get("system")
    extra = [{"content": system}] if isinstance(system, (str, list)) else []
    return mock_upstream._prompt_tokens({"messages": [*req["messages"], *extra]})


def _usage(req: dict[str, Any], output: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens(req),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    }


def whole(req: dict[str, Any], number: int, tokens: int) -> bytes:
    """A whole reply's body."""
    text = "".join(mock_upstream._tokens(tokens))
    message = {
        "id": f"msg_mock{number}",
        "type": "message",
        "role": "assistant",
        "model": req["model"],
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": _usage(req, tokens),
    }
    return mock_upstream.dumps(message)


def _event(name: str, data: dict[str, Any]) -> bytes:
    payload = b"event: " + name.encode() + b"\ndata: " + mock_upstream.dumps(data) + b"\n\n"
    return mock_upstream._chunk(payload)


def stream(req: dict[str, Any], number: int, tokens: int) -> bytes:
    """A whole stream's chunked body, its end included."""
    start = {
        "id": f"msg_mock{number}",
        "type": "message",
        "role": "assistant",
        "model": req["model"],
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(req, 1),
    }
    out = [
        _event("message_start", {"type": "message_start", "message": start}),
        _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        _event("ping", {"type": "ping"}),
    ]
    for token in mock_upstream._tokens(tokens):
        delta = {"type": "text_delta", "text": token}
        out.append(
            _event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    out.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    out.append(
        _event(
            "message_delta",
            {"type": "message_delta", "delta": stop, "usage": {"output_tokens": tokens}},
        )
    )
    out.append(_event("message_stop", {"type": "message_stop"}))
    out.append(b"0\r\n\r\n")
    return b"".join(out)
