"""Authenticate every request and check the route table before any route runs.

A plain ASGI middleware (it runs on every request: no FastAPI dependency machinery, no
I/O; the key lookup is an in-memory read of the key cache). It sets
`scope["farebox.principal"]` (see gateway.auth.principal) on every request but `/healthz`,
and answers 401 (with `WWW-Authenticate: Bearer`) or 403 in OpenAI's error shape;
`RequestIdMiddleware` outside it adds `x-request-id`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.anthropic_errors import anthropic_error_bytes, is_messages_path
from gateway.auth.access import RouteClass, refusal, route_class
from gateway.auth.authenticate import authenticate
from gateway.auth.credentials import credential_of
from gateway.auth.principal import ADMIN, OPEN, SCOPE_KEY
from gateway.errors import AuthenticationError, FareboxError, PermissionDeniedError, error_bytes
from gateway.keys.model import KeyRecord
from gateway.keys.secrets import SECRET_PREFIX


class AuthMiddleware:
    """401 for a missing or bad credential, 403 for a route its principal may not call."""

    def __init__(self, app: ASGIApp, *, admin_key: SecretStr | None) -> None:
        self.app = app
        self.admin_key = admin_key.get_secret_value().encode() if admin_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and self.admin_key is not None:
            # No websocket route checks a key yet: refuse them all rather than let one in.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http" or await self.admit(scope, send):
            await self.app(scope, receive, send)

    async def admit(self, scope: Scope, send: Send) -> bool:
        """Set the HTTP request's principal and say True, or answer 401/403 and say False.

        The model routes' fronts (gateway.front) call it without the middleware around it.
        """
        if self.admin_key is None:  # the open mode
            scope[SCOPE_KEY] = OPEN
            return True
        cls = route_class(scope["path"])
        if cls is RouteClass.PUBLIC:
            return True
        try:
            credential = credential_of(scope["headers"])
            principal = authenticate(
                credential,
                admin_key=self.admin_key,
                lookup=await _lookup_for(scope, credential),
                clock=_now,
            )
        except AuthenticationError as exc:
            await _answer(send, exc, ((b"www-authenticate", b"Bearer"),), scope["path"])
            return False
        if cls is None:  # matched after the key check: a flood without one stays cheap
            cls = RouteClass.ADMIN if principal is ADMIN else _unlisted_class(scope)
        denied = refusal(cls, principal)
        if denied is not None:
            await _answer(send, PermissionDeniedError(denied), path=scope["path"])
            return False
        scope[SCOPE_KEY] = principal
        return True


def _unlisted_class(scope: Scope) -> RouteClass:
    """A route missing from the table takes the admin key (fail closed); no route: any key."""
    for route in getattr(scope.get("app"), "routes", ()):
        if route.matches(scope)[0] is not Match.NONE:  # a route (or a wrong method on it)
            return RouteClass.ADMIN
    return RouteClass.UNKNOWN


def _no_keys(secret: str) -> KeyRecord | None:
    return None


def _now() -> datetime:
    return datetime.now(UTC)


async def _lookup_for(scope: Scope, credential: str | None) -> Any:
    """The key cache's lookup (built in the lifespan); none before the lifespan ran.

    A virtual key this replica has not seen yet (made on another replica a moment ago)
    waits for the refresh its miss starts, at most one a second: it works at once.
    """
    state = scope.get("state")  # the lifespan's state, a plain dict: cheaper than app.state
    services = state.get("services") if isinstance(state, dict) else None
    if services is None:
        services = getattr(getattr(scope.get("app"), "state", None), "services", None)
    keys = getattr(services, "keys", None)
    if keys is None:
        return _no_keys
    if credential and credential.startswith(SECRET_PREFIX) and keys.lookup(credential) is None:
        await keys.resolve(credential)
    return keys.lookup


async def _answer(
    send: Send, error: FareboxError, extra: tuple[tuple[bytes, bytes], ...] = (), path: str = ""
) -> None:
    """Answer `error` without reading the body (the server discards what is left of it).

    The Messages API's paths get Anthropic's error shape, which its clients parse.
    """
    body = anthropic_error_bytes(error) if is_messages_path(path) else error_bytes(error)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
