from __future__ import annotations

import httpx

from gateway.errors import UpstreamStatusError, UpstreamTimeoutError, UpstreamUnreachableError
from gateway.upstream.failures import describe_upstream, from_status, from_transport_error

KEY = "sk-live-abcdef123456"


def test_vllm_integer_code_becomes_openai_shape() -> None:
    body = (
        b'{"error":{"message":"bad max_tokens","type":"BadRequestError","param":null,"code":400}}'
    )
    error = from_status(400, body, "local (10.0.0.1:8000)")
    assert isinstance(error, UpstreamStatusError)
    assert error.status_code == 400
    assert error.body()["error"] == {
        "message": "upstream local (10.0.0.1:8000) returned 400: bad max_tokens",
        "type": "invalid_request_error",
        "param": None,
        "code": "400",
    }


def test_old_vllm_flat_error_and_anthropic_error() -> None:
    flat = (
        b'{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}'
    )
    assert "too long" in from_status(400, flat, "x").message
    anthropic = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    error = from_status(529, anthropic, "claude")
    assert error.status_code == 529 and "Overloaded" in error.message
    assert error.error_type == "upstream_error" and error.retryable


def test_secret_in_upstream_message_is_redacted() -> None:
    body = b'{"error":{"message":"Incorrect API key provided: sk-live-abcdef123456"}}'
    error = from_status(401, body, "openai", [KEY])
    assert KEY not in error.message and "[redacted]" in error.message
    assert error.error_type == "authentication_error"


def test_plain_text_body_and_retry_after_header_relayed() -> None:
    error = from_status(429, b"slow down", "x", headers={"Retry-After": "3", "Set-Cookie": "s"})
    assert error.headers == {"Retry-After": "3"}
    assert "slow down" in error.message


def test_transport_errors() -> None:
    request = httpx.Request("POST", "http://h")
    assert isinstance(
        from_transport_error(httpx.ConnectError("x", request=request), "a"),
        UpstreamUnreachableError,
    )
    assert isinstance(
        from_transport_error(httpx.ReadTimeout("x", request=request), "a"), UpstreamTimeoutError
    )


def test_describe_upstream_never_shows_credentials_or_path() -> None:
    assert (
        describe_upstream("m", "https://user:pw@api.example.com:8443/v1?key=1")
        == "m (api.example.com:8443)"
    )
