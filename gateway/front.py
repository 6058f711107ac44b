"""The chat path in front of FastAPI: every middleware's work for it, in one layer.

Each POST /v1/chat/completions used to pass FastAPI's and Starlette's `__call__`,
Starlette's `ServerErrorMiddleware`, FastAPI's exception-telemetry and body-limit
middlewares, then the gateway's own five (request id, in-flight scope, auth, body guard,
JSON body) before `ChatLane` took it: a coroutine per layer per request, and three
wrappers around `send` (a call each per message of a stream) and one around `receive`.

`Gateway.__call__` hands that request to `ChatFront` instead, which does the same work
in the same order, from the same code: it gives the request its id, tracks it in flight
for the shutdown's cut (`gateway.drain.TrackedRequest`: its task, no anyio scope), admits
it (`AuthMiddleware.admit`), reads its body (`BodyGuard.read`), reads it as JSON
(`json_body.as_json`) and answers it (`gateway.api.chat.answer`), with one `send` wrapper
(the id on the response start, and whether it started) and no `receive` wrapper. An
unhandled exception gets the 500 the app's handler gives, in OpenAI's shape with the
request id, and goes on to the server, as `ServerErrorMiddleware` does. Every other
request, and the lifespan, goes through FastAPI as before; with tracing on, the chat path
runs under the same tracing middleware.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.chat import PATH, answer
from gateway.auth.middleware import AuthMiddleware
from gateway.body_guard import BodyGuard
from gateway.drain import TASK_KEY, InFlight, TrackedRequest
from gateway.errors import ShuttingDownError, error_body, send_error
from gateway.json_body import as_json
from gateway.request_id import HEADER, request_id_header, request_id_of

log = logging.getLogger("farebox")
_RETRY = (b"retry-after", b"1")


class Gateway(FastAPI):
    """FastAPI, with POST /v1/chat/completions handed to `chat` (when set) before it.

    `gateway.server` makes the same hand-over itself for the requests it sends straight
    here (`scope["app"]` set, then `chat`): one coroutine less per request.
    """

    chat: ASGIApp | None = None
    # The path `chat` serves; the server hands POST requests to it straight to this app.
    chat_path = PATH

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chat = self.chat
        if (
            chat is not None
            and scope["type"] == "http"
            and scope["path"] == PATH
            and scope["method"] == "POST"
        ):
            scope["app"] = self  # as Starlette sets it
            await chat(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class ChatFront:
    """The gateway's middlewares and the chat lane, fused for the chat path."""

    def __init__(self, in_flight: InFlight, auth: AuthMiddleware, guard: BodyGuard) -> None:
        self.in_flight = in_flight
        self.auth = auth
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id_of(scope)  # the request's id, given before anything else runs
        started = False

        def send_with_id(message: Message) -> Awaitable[None]:
            # Not a coroutine of its own: it hands back the server's `send(message)` for
            # the caller to await (one frame less per message; a stream sends dozens).
            nonlocal started
            if not started and message["type"] == "http.response.start":
                started = True
                headers = message.get("headers", ())
                # The chat reply names its id first (pipeline.chat._headers); else look.
                if not (headers and headers[0][0] == HEADER) and not any(
                    name.lower() == HEADER for name, _ in headers
                ):
                    message = {**message, "headers": [*headers, request_id_header(scope)]}
            return send(message)

        # In flight, cut at the end of a shutdown's grace: its task, not an anyio scope
        # (gateway.drain: ~4-8 µs a request less), whose cut this block takes back.
        cut = TrackedRequest(self.in_flight, scope.get(TASK_KEY))
        try:
            await self._serve(scope, receive, send_with_id)
        except asyncio.CancelledError:
            if cut.leave() or not cut.called:
                raise  # not the cut's (or not only): the server's own
        except Exception as exc:
            cut.leave()
            if not started:  # as ServerErrorMiddleware: a 500 if it can, then to the server
                await unexpected_error(scope, exc)(scope, receive, send)
            raise
        except BaseException:
            cut.leave()
            raise
        else:
            cut.leave()
        if cut.called and not started:
            # Cut before it could answer (its row is booked): say why, in OpenAI's shape.
            error = ShuttingDownError("the gateway is shutting down; retry the request")
            await send_error(send, error, (_RETRY, request_id_header(scope)))

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.auth.admit(scope, send):
            return
        raw = await self.guard.read(scope, receive, send)
        if raw is not None:  # else refused, or the client left: nothing more to do
            await answer(as_json(scope), raw, receive, send)


def unexpected_error(scope: Any, exc: Exception) -> JSONResponse:
    """The 500 for an exception nothing handled: OpenAI's shape, the request's id; logged."""
    request_id = request_id_of(scope)
    log.error("unhandled %s on %s (%s)", type(exc).__name__, scope.get("path"), request_id)
    body = error_body("internal gateway error; see the gateway log", "server_error")
    return JSONResponse(body, status_code=500, headers={"x-request-id": request_id})
