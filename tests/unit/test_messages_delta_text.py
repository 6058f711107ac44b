"""A token's `content_block_delta` read from its bytes (`delta_text`) is what the full read
(the event parsed, `MessagesMeter.observe_event`) meters, or it is left to the full read:
on Anthropic's own renderings, and on any bytes spliced into one."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamProtocolError
from gateway.pipeline.event_relay import event_payload
from gateway.pipeline.messages_meter import MessagesMeter, delta_text

KINDS = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking")}


def _event(text: str, kind: str, index: int, ascii_only: bool, blank_line: bool) -> bytes:
    delta_type, key = KINDS[kind]
    data: dict[str, Any] = {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": delta_type, key: text},
    }
    if ascii_only:  # \\uXXXX escapes, as a JSON writer with ensure_ascii writes them
        rendered = json.dumps(data, separators=(",", ":")).encode()
    else:
        rendered = orjson.dumps(data)
    return b"event: content_block_delta\ndata: " + rendered + (b"\n\n" if blank_line else b"")


def _metered(meter: MessagesMeter) -> tuple[int, list[str], list[str], bool]:
    inner = meter.meter
    return inner.chunks, inner.answer_parts, inner.reasoning_parts, inner.first_token is not None


def _full_read(event: bytes) -> tuple[int, list[str], list[str], bool] | None:
    """What the relay's full read meters from `event`; None where it refuses the event."""
    try:
        payload = event_payload(event, "test")
    except UpstreamProtocolError:
        return None
    meter = MessagesMeter()
    if payload is not None:
        meter.observe_event(payload)
    return _metered(meter)


def _fast_read(event: bytes) -> tuple[int, list[str], list[str], bool] | None:
    meter = MessagesMeter()
    return _metered(meter) if meter.observe_delta_event(event) else None


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(),
    kind=st.sampled_from(sorted(KINDS)),
    index=st.integers(0, 10**6),
    ascii_only=st.booleans(),
    blank_line=st.booleans(),
)
def test_anthropics_renderings_are_read_from_their_bytes_as_the_full_read_reads_them(
    text: str, kind: str, index: int, ascii_only: bool, blank_line: bool
) -> None:
    event = _event(text, kind, index, ascii_only, blank_line)
    assert delta_text(event) == (text, kind == "thinking")
    assert _fast_read(event) == _full_read(event)


SPLICED = st.binary(max_size=6) | st.sampled_from(
    [b'"', b"\\", b"\\u", b"\\ud800", b"}", b",", b"\n", b"\r", b" ", b"0", b"\xff", b"\xc3"]
)


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(max_size=20),
    kind=st.sampled_from(sorted(KINDS)),
    at=st.integers(0, 200),
    cut=st.integers(0, 4),
    spliced=SPLICED,
)
def test_bytes_spliced_anywhere_are_read_as_the_full_read_reads_them_or_left_to_it(
    text: str, kind: str, at: int, cut: int, spliced: bytes
) -> None:
    event = _event(text, kind, 0, False, True)
    at = min(at, len(event))
    mutated = event[:at] + spliced + event[at + cut :]
    fast = _fast_read(mutated)
    if fast is not None:  # read from the bytes: exactly what the full read meters
        assert fast == _full_read(mutated)


def test_other_events_and_other_spellings_are_left_to_the_full_read() -> None:
    others = [
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"input_json_delta","partial_json":"{}"}}\n\n',  # a tool's input
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {"type": "text_delta", "text": "hi"}}\n\n',  # spaced
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"hi"}}\r\n\r\n',  # CR LF
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":01,'
        b'"delta":{"type":"text_delta","text":"hi"}}\n\n',  # not JSON: a leading zero
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","thinking":"hi"}}\n\n',  # a text delta's other key
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"\\x"}}\n\n',  # not JSON: a bad escape
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ]
    for event in others:
        assert delta_text(event) is None, event
