"""Token times only where they were observed; one name for a backend in rows and metrics."""

from __future__ import annotations

from itertools import count

from gateway.config import ModelRoute
from gateway.pipeline.context import RequestContext
from gateway.pipeline.measure import Meter
from gateway.pipeline.record import backend_of, decode_speed
from gateway.usage import Usage

REPLY = {
    "choices": [
        {
            "message": {"role": "assistant", "reasoning": "hm", "content": "Hi"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 30},
}


def test_a_whole_reply_has_no_token_times() -> None:
    ticks = count(1)
    meter = Meter(clock=lambda: float(next(ticks)))
    meter.observe_reply(REPLY)
    assert (meter.first_token, meter.first_answer_token, meter.last_token) == (None,) * 3
    # What the reply said is still read: text, reasoning, usage, finish reason.
    assert meter.seen_answer == "Hi" and meter.seen_reasoning == "hm"
    assert meter.finish_reason == "stop"
    assert meter.usage is not None and meter.usage.completion_tokens == 30


def test_a_stream_has_token_times() -> None:
    ticks = count(1)
    meter = Meter(clock=lambda: float(next(ticks)))
    meter.observe_chunk({"choices": [{"delta": {"reasoning": "hm"}}]})
    meter.observe_chunk({"choices": [{"delta": {"content": "Hi"}}]})
    assert (meter.first_token, meter.first_answer_token, meter.last_token) == (1.0, 2.0, 2.0)


def test_no_decode_speed_without_a_first_token() -> None:
    ctx = RequestContext(raw_body=b"{}", headers={})
    ctx.usage = Usage(prompt_tokens=5, completion_tokens=30)
    ctx.timings.upstream_sent, ctx.timings.finished = 1.0, 3.0
    assert decode_speed(ctx) is None
    ctx.timings.first_token, ctx.timings.last_token = 1.5, 2.5
    assert decode_speed(ctx) == 29.0


def test_backend_name_is_the_base_url_without_credentials_or_the_provider() -> None:
    def named(base_url: str | None, provider: str = "openai") -> str:
        return backend_of(ModelRoute(provider=provider, model="m", base_url=base_url))

    assert named("sim") == "sim"
    assert named("http://127.0.0.1:8001/v1") == "http://127.0.0.1:8001/v1"
    assert named("https://user:secret@api.example.com/v1?key=k") == "https://api.example.com/v1"
    assert named("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert named(None) == "openai"
    assert named(None, provider="anthropic") == "anthropic"
