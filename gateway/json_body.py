"""Request bodies are JSON on every route, whatever their content-type says.

Chat completions never looked at the header; FastAPI's body models did, answering a body
sent without one (or curl's default `-d` type, form-urlencoded) with a 400 that named no
cause. The API (`/v1/...`, `/admin/...`) takes nothing but JSON, so this plain ASGI
middleware says so for it: a POST, PUT or PATCH body whose type is not JSON is read as
JSON. Other paths (the web UI's) keep their content-type.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_API = ("/v1/", "/admin/")
_JSON = (b"content-type", b"application/json")


def _is_json(value: bytes) -> bool:
    media = value.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


class JsonBodyMiddleware:
    """Rewrite a missing or non-JSON content-type of a request body to application/json."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in _WITH_BODY
            and scope["path"].startswith(_API)
        ):
            scope = as_json(scope)
        await self.app(scope, receive, send)


def as_json(scope: Scope) -> Scope:
    """`scope`, or a copy whose content-type says JSON where it said something else or nothing."""
    headers = scope["headers"]
    for name, value in headers:
        if name == b"content-type":
            if value == b"application/json" or _is_json(value):  # the first test: fast
                return scope
            break
    kept = [header for header in headers if header[0] != b"content-type"]
    return {**scope, "headers": [*kept, _JSON]}
