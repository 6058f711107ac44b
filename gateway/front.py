"""The proxy paths in front of FastAPI: every middleware's work for them, in one layer.

Each POST to a model route (/v1/chat/completions, /v1/messages and its count_tokens,
/v1/responses, /v1/completions, /v1/embeddings) used to pass FastAPI's and Starlette's
`__call__`, Starlette's `ServerErrorMiddleware`, FastAPI's exception-telemetry and
body-limit middlewares, the gateway's own five (request id, in-flight scope, auth, body
guard, JSON body), then Starlette's router and FastAPI's dependency solving: a coroutine
per layer per request, and three wrappers around `send` (a call each per message of a
stream) and one around `receive`.

`Gateway.__call__` hands such a request to its `Front` instead (`Gateway.lanes`: path to
front), which does the same work in the same order, from the same code: it gives the
request its id, tracks it in flight for the shutdown's cut (`gateway.drain.TrackedRequest`:
its task, no anyio scope), admits it (`AuthMiddleware.admit`), reads its body
(`BodyGuard.read`), reads it as JSON (`json_body.as_json`) and answers it with the
route's `answer` (`gateway.api.chat.answer`, `gateway.api.messages.answer`, ...), with
one `send` wrapper (the id on the response start, and whether it started) and no
`receive` wrapper. An unhandled exception gets the 500 the app's handler gives, in
OpenAI's shape with the request id, and goes on to the server, as
`ServerErrorMiddleware` does (the Messages API's answer renders its own, in Anthropic's
shape). Every other request, and the lifespan, goes through FastAPI as before; the
routes stay declared there too (the OpenAPI document), served by the same `answer` code.
With tracing on, each front runs under the same tracing middleware.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.anthropic_errors import send_path_error
from gateway.auth.middleware import AuthMiddleware
from gateway.body_guard import BodyGuard
from gateway.drain import TASK_KEY, InFlight, TrackedRequest
from gateway.errors import ShuttingDownError, error_body
from gateway.json_body import as_json
from gateway.request_id import HEADER, request_id_header, request_id_of

log = logging.getLogger("farebox")
_RETRY = (b"retry-after", b"1")


Answer = Callable[[Scope, bytes, Receive, Send], Awaitable[None]]
"""A route's answer to a request its front admitted: the scope, the body, the channels."""


# Each front's path and the module whose `answer` serves it, in `gateway.api.routers.ORDER`.
LANES = {
    "/v1/chat/completions": "gateway.api.chat",
    "/v1/messages": "gateway.api.messages",
    "/v1/messages/count_tokens": "gateway.api.messages",
    "/v1/responses": "gateway.api.responses",
    "/v1/completions": "gateway.api.completions",
    "/v1/embeddings": "gateway.api.completions",
}


class LazyAnswer:
    """A module's `answer`, imported on its first request: the model routes other than
    chat are deferred (gateway.api.routers, `DEFERRED`), and so is their front's code."""

    __slots__ = ("_answer", "module")

    def __init__(self, module: str) -> None:
        self.module = module
        self._answer: Answer | None = None

    def __call__(self, scope: Scope, raw: bytes, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine of its own: hands back the answer's, for the front to await.
        answer = self._answer
        if answer is None:
            answer = self._answer = importlib.import_module(self.module).answer
        return answer(scope, raw, receive, send)


def answer_of(module: str, defer: bool) -> Answer:
    """`module`'s `answer`: imported now, or with `defer` on its first request (never
    for chat's, which every gateway serves and `gateway.api.routers` imports at once)."""
    if defer and module != "gateway.api.chat":
        return LazyAnswer(module)
    answer: Answer = importlib.import_module(module).answer
    return answer


class Gateway(FastAPI):
    """FastAPI, with a POST to one of `lanes`' paths handed to its front before it.

    `gateway.server` makes the same hand-over itself for the requests it sends straight
    here (`scope["app"]` set, then the front): one coroutine less per request.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # POST path -> its front; filled by `gateway.app.create_app` (empty: all FastAPI's).
        self.lanes: dict[str, ASGIApp] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            lane = self.lanes.get(scope["path"])
            if lane is not None:
                scope["app"] = self  # as Starlette sets it
                await lane(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


class Front:
    """The gateway's middlewares and a route's `answer`, fused for that route's path."""

    def __init__(
        self, in_flight: InFlight, auth: AuthMiddleware, guard: BodyGuard, answer: Answer
    ) -> None:
        self.in_flight = in_flight
        self.auth = auth
        self.guard = guard
        self.answer = answer

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
                # A chat reply names its id first (pipeline.chat._headers); else look.
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
            # Cut before it could answer (its row is booked): say why, in the path's shape.
            error = ShuttingDownError("the gateway is shutting down; retry the request")
            await send_path_error(send, error, scope["path"], (_RETRY, request_id_header(scope)))

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.auth.admit(scope, send):
            return
        raw = await self.guard.read(scope, receive, send)
        if raw is not None:  # else refused, or the client left: nothing more to do
            await self.answer(as_json(scope), raw, receive, send)


def unexpected_error(scope: Any, exc: Exception) -> JSONResponse:
    """The 500 for an exception nothing handled: OpenAI's shape, the request's id; logged."""
    request_id = request_id_of(scope)
    log.error("unhandled %s on %s (%s)", type(exc).__name__, scope.get("path"), request_id)
    body = error_body("internal gateway error; see the gateway log", "server_error")
    return JSONResponse(body, status_code=500, headers={"x-request-id": request_id})
