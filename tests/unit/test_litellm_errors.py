"""litellm failures are blamed on the client when nothing was sent, else on the upstream."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.errors import (
    InvalidRequestError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.upstream.litellm_errors import translate_litellm_error

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")
KEY = "sk-ant-secret-0123456789"
WHERE = "claude (127.0.0.1:9)"


def _wrapped(cause: BaseException, message: str) -> openai.APIConnectionError:
    """What litellm raises for a failure inside its own code: the cause as context."""
    error = openai.APIConnectionError(message=message, request=REQUEST)
    error.__context__ = cause
    return error


def _status(status: int, message: str) -> openai.APIStatusError:
    return openai.APIStatusError(
        message, response=httpx.Response(status, request=REQUEST), body=None
    )


def test_a_request_litellm_refuses_before_sending_is_the_clients_400() -> None:
    exc = _wrapped(
        TypeError("Unsupported response_format type - 5"),
        "litellm.APIConnectionError: Unsupported response_format type - 5\n"
        'Traceback (most recent call last):\n  File "main.py", line 6083',
    )
    error = translate_litellm_error(exc, WHERE, [KEY], sent=False)
    assert isinstance(error, InvalidRequestError) and error.status_code == 400
    assert error.param == "response_format"
    assert (
        error.message
        == f"the request cannot be sent to {WHERE}: Unsupported response_format type - 5"
    )


@pytest.mark.parametrize(
    "exc",
    [
        AttributeError("'str' object has no attribute 'get'"),
        _status(400, "litellm.BadRequestError: Invalid tool choice, tool_choice=5."),
        _wrapped(KeyError("function"), "litellm.APIConnectionError: 'function'"),
    ],
)
def test_anything_raised_unsent_is_a_400(exc: BaseException) -> None:
    error = translate_litellm_error(exc, WHERE, [KEY], sent=False)
    assert type(error) is InvalidRequestError and error.status_code == 400


def test_the_same_failure_after_sending_is_a_bad_reply() -> None:
    exc = _wrapped(KeyError("content"), "litellm.APIConnectionError: 'content'")
    error = translate_litellm_error(exc, WHERE, [KEY], sent=True)
    assert isinstance(error, UpstreamProtocolError) and error.code == "upstream_bad_reply"
    assert isinstance(
        translate_litellm_error(ValueError("bad json"), WHERE, [KEY], sent=True),
        UpstreamProtocolError,
    )


def test_transport_failures_and_timeouts_after_sending() -> None:
    connect = _status(500, "litellm.InternalServerError: AnthropicException - Cannot connect")
    connect.__context__ = httpx.ConnectError("refused")
    assert isinstance(
        translate_litellm_error(connect, WHERE, [KEY], sent=True), UpstreamUnreachableError
    )
    timeout = openai.APITimeoutError(request=REQUEST)
    assert isinstance(
        translate_litellm_error(timeout, WHERE, [KEY], sent=True), UpstreamTimeoutError
    )
    read = _wrapped(httpx.ReadTimeout("slow"), "litellm.Timeout")
    assert isinstance(translate_litellm_error(read, WHERE, [KEY], sent=True), UpstreamTimeoutError)
    bare = openai.APIConnectionError(request=REQUEST)
    assert isinstance(
        translate_litellm_error(bare, WHERE, [KEY], sent=True), UpstreamUnreachableError
    )


def test_provider_statuses_are_relayed_and_keys_redacted() -> None:
    exc = _status(529, f"litellm.InternalServerError: AnthropicException - overloaded {KEY}")
    error = translate_litellm_error(exc, WHERE, [KEY], sent=True)
    assert isinstance(error, UpstreamStatusError) and error.status_code == 529
    assert KEY not in error.message and "overloaded" in error.message
    refused = _wrapped(TypeError(f"bad key {KEY}"), f"litellm.APIConnectionError: bad {KEY}")
    assert KEY not in translate_litellm_error(refused, WHERE, [KEY], sent=False).message


def test_outages_count_even_when_the_send_was_not_seen() -> None:
    """A provider litellm sends through its own client never sets the mark."""
    unavailable = _status(503, "litellm.ServiceUnavailableError: overloaded")
    error = translate_litellm_error(unavailable, WHERE, [KEY], sent=False)
    assert isinstance(error, UpstreamStatusError) and error.status_code == 503
    limited = translate_litellm_error(_status(429, "slow down"), WHERE, [KEY], sent=False)
    assert isinstance(limited, UpstreamStatusError) and limited.status_code == 429
    refused = _wrapped(httpx.ConnectError("refused"), "litellm.APIConnectionError: refused")
    assert isinstance(
        translate_litellm_error(refused, WHERE, [KEY], sent=False), UpstreamUnreachableError
    )
    late = openai.APITimeoutError(request=REQUEST)
    assert isinstance(translate_litellm_error(late, WHERE, [KEY], sent=False), UpstreamTimeoutError)
