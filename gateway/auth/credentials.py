"""Read the caller's credential from the request headers (pure: ASGI headers in, str out).

OpenAI-style clients send `Authorization: Bearer <key>`; Anthropic-style clients send
`x-api-key: <key>`. Either is accepted; both at once must agree, since a gateway that
picked one of two different keys would bill a caller for what it did not choose.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.errors import AuthenticationError

_AUTHORIZATION = b"authorization"
_API_KEY = b"x-api-key"
_BEARER = "bearer "


def credential_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key the request carries, or None; 401 for a malformed or conflicting pair."""
    bearer: str | None = None
    api_key: str | None = None
    for name, value in headers:  # ASGI servers lower-case header names
        if name == _AUTHORIZATION:
            bearer = _agreeing(bearer, _bearer(value.decode("latin-1")), "Authorization")
        elif name == _API_KEY:
            api_key = _agreeing(api_key, value.decode("latin-1").strip() or None, "x-api-key")
    if bearer is not None and api_key is not None and bearer != api_key:
        raise AuthenticationError(
            "the Authorization and x-api-key headers carry two different keys: send one"
        )
    return bearer if bearer is not None else api_key


def _agreeing(seen: str | None, value: str | None, header: str) -> str | None:
    """A repeated header must repeat the same key: a proxy reading the first of two and
    the gateway the last would check one key and bill another."""
    if seen is not None and value is not None and seen != value:
        raise AuthenticationError(f"two {header} headers carry two different keys: send one")
    return value if value is not None else seen


def _bearer(value: str) -> str | None:
    """The key of `Bearer <key>`; None when empty; 401 for another scheme (Basic, ...)."""
    value = value.strip()
    if not value or value.lower() == _BEARER.strip():
        return None
    if value[: len(_BEARER)].lower() != _BEARER:
        raise AuthenticationError(
            "the Authorization header must be `Bearer <key>` (or send the key in x-api-key)"
        )
    return value[len(_BEARER) :].strip() or None
