"""Reading the tier an Anthropic stream reports in `message_start`, as its bytes go by."""

from __future__ import annotations

import orjson

from gateway.upstream.stream_tier import StreamTierReport


def _event(kind: str, data: dict[str, object], newline: bytes = b"\n") -> bytes:
    body = orjson.dumps({"type": kind, **data})
    return b"event: " + kind.encode() + newline + b"data: " + body + newline + newline


START = _event(
    "message_start",
    {"message": {"usage": {"input_tokens": 5, "service_tier": "standard", "speed": "fast"}}},
)


def test_the_first_event_is_read_across_any_split() -> None:
    stream = _event("ping", {}) + START + _event("message_stop", {})
    for size in (1, 7, 64, len(stream)):
        report = StreamTierReport()
        for start in range(0, len(stream), size):
            report.feed(stream[start : start + size])
        assert report.said == {"service_tier": "standard", "speed": "fast"} and report.done


def test_crlf_framing_and_a_stream_that_says_nothing() -> None:
    report = StreamTierReport()
    report.feed(_event("message_start", {"message": {"usage": {}}}, newline=b"\r\n"))
    assert report.done and report.said == {}
    other = StreamTierReport()
    other.feed(_event("content_block_start", {"index": 0}) + START)
    assert other.done and other.said == {}  # only the first real event counts


def test_annotate_fills_only_what_litellm_left_out() -> None:
    report = StreamTierReport()
    report.feed(START)
    chunk = {"choices": [], "usage": {"prompt_tokens": 5, "speed": "standard"}}
    assert report.annotate(chunk)["usage"] == {
        "prompt_tokens": 5,
        "speed": "standard",  # litellm's own value stays
        "service_tier": "standard",
    }
    assert report.annotate({"choices": []}) == {"choices": []}
    assert StreamTierReport().annotate(chunk) is chunk


def test_a_huge_first_event_is_given_up_on() -> None:
    report = StreamTierReport()
    report.feed(b"data: " + b"x" * (2 << 20))
    assert report.done and report.said == {}
