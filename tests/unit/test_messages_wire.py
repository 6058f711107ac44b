"""The Messages path's pure parts: policy edits in Anthropic's fields, headers, usage, errors."""

from __future__ import annotations

from gateway.anthropic_errors import anthropic_error_body, anthropic_type, is_messages_path
from gateway.errors import InvalidRequestError, PermissionDeniedError
from gateway.pipeline.context import BodyEdits
from gateway.pipeline.messages import native_edits
from gateway.pipeline.messages_meter import MessagesMeter
from gateway.upstream.anthropic_messages import merged_betas, messages_url, upstream_headers


def test_an_adaptive_effort_becomes_thinking_and_output_config() -> None:
    body = {"model": "opus", "output_config": {"format": "x"}, "thinking": {"type": "enabled"}}
    edits = BodyEdits({"reasoning_effort": "low", "stream_options": {"include_usage": True}})
    native = native_edits(edits, body)
    assert native.set_fields == {
        "thinking": {"type": "adaptive"},
        "output_config": {"format": "x", "effort": "low"},
    }
    assert native.remove == set()
    assert edits.set_fields["reasoning_effort"] == "low"  # the pipeline's own edits untouched


def test_litellm_tier_spellings_become_the_messages_apis() -> None:
    assert native_edits(BodyEdits({"service_tier": "default"}), {}).set_fields == {
        "service_tier": "standard_only"
    }
    assert native_edits(BodyEdits({"service_tier": "auto"}), {}).set_fields == {
        "service_tier": "auto"
    }


def test_headers_carry_the_routes_key_and_merge_betas() -> None:
    client = {"anthropic-beta": "a, b", "x-api-key": "client-secret", "authorization": "Bearer c"}
    headers = upstream_headers(client, {"anthropic-beta": "b,fast"}, "route-key")
    assert headers == {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "a,b,fast",
        "x-api-key": "route-key",
    }
    assert merged_betas(None, "") == ""


def test_urls_with_or_without_v1() -> None:
    assert messages_url("http://sim:1", "/v1/messages") == "http://sim:1/v1/messages"
    assert messages_url("http://sim:1/v1/", "/v1/messages") == "http://sim:1/v1/messages"
    assert messages_url("", "/v1/messages") == "https://api.anthropic.com/v1/messages"


def test_stream_usage_is_message_start_with_message_delta_over_it() -> None:
    meter = MessagesMeter()
    start = {"input_tokens": 10, "cache_read_input_tokens": 100, "output_tokens": 1}
    meter.observe_event({"type": "message_start", "message": {"usage": start}})
    meter.observe_event(
        {"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "hm"}}
    )
    meter.observe_event(
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "ok"}}
    )
    meter.observe_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 42},
        }
    )
    meter.observe_event({"type": "message_stop"})
    usage = meter.meter.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (110, 100, 42)
    assert meter.stopped and meter.meter.finish_reason == "end_turn"
    timings = meter.meter
    assert timings.first_token is not None and timings.first_answer_token is not None
    assert timings.first_token <= timings.first_answer_token


def test_errors_take_anthropics_type_by_status() -> None:
    assert anthropic_error_body(InvalidRequestError("bad"), "req-1") == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
        "request_id": "req-1",
    }
    assert anthropic_error_body(PermissionDeniedError("no"))["error"]["type"] == "permission_error"
    statuses = {401: "authentication_error", 429: "rate_limit_error", 529: "overloaded_error"}
    assert all(anthropic_type(status) == kind for status, kind in statuses.items())
    assert anthropic_type(502) == anthropic_type(503) == "api_error"
    assert is_messages_path("/v1/messages") and is_messages_path("/v1/messages/count_tokens")
    assert not is_messages_path("/v1/messagesx") and not is_messages_path("/v1/chat/completions")


def test_a_cut_stream_estimates_its_output_from_the_text_seen() -> None:
    meter = MessagesMeter()
    start = {"input_tokens": 10, "output_tokens": 1}
    meter.observe_event({"type": "message_start", "message": {"usage": start}})
    text = "one two three four five six seven eight"
    meter.observe_event(
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}}
    )
    meter.estimate_cut_output()
    usage = meter.meter.usage
    assert usage is not None and usage.estimated
    assert usage.prompt_tokens == 10 and usage.completion_tokens == 8
    finished = MessagesMeter()
    finished.observe_event({"type": "message_start", "message": {"usage": start}})
    finished.observe_event({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 3}})
    finished.estimate_cut_output()
    assert finished.meter.usage is not None and not finished.meter.usage.estimated
