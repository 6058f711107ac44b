"""CPU per request of the stack in front of the chat pipeline, in-process, side by side.

Drives the real app (`create_app`: every middleware, the chat lane) through its ASGI
interface, one small POST /v1/chat/completions after another, with the pipeline's
`handle_chat` replaced by a fixed reply: only what runs before and after it is timed
(request id, in-flight scope, auth, JSON body, body guard, then the chat lane or
FastAPI's route). Variants, each in the same process and run:

- `front`: the app as built (`Gateway` hands chat to its `Front`, every middleware's
  work in one layer in front of FastAPI, gateway/front.py);
- `lane`: the front turned off, so chat passes FastAPI's and Starlette's layers and each
  middleware before `ChatLane` hands it to the plain ASGI `ChatEndpoint`;
- `fastapi-route`: the lane taken out, so chat goes through Starlette's exception
  middleware, FastAPI's exit-stack middleware, its router and its route with its
  dependency (the path before issue 12);
- `fastapi-route+telemetry`: the same with FastAPI's native OpenTelemetry left on (its
  default): the whole path before issue 12;
- `bare`: a plain ASGI app that reads the body and sends the same reply: the floor.

  .venv/bin/python bench/chat_front.py [--requests 4000] [--rounds 5] [--src CHECKOUT]
      [--only front,bare] [--uvloop]

`--src` imports the gateway from another checkout (an A/B of two trees, run alternately),
`--only` keeps the named variants, `--uvloop` runs on uvloop (what `farebox serve` runs).

Prints a Markdown table: the best and the median round, microseconds of CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]
from starlette.middleware import Middleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send


def _early_src(argv: list[str]) -> str | None:
    """`--src`, read before `gateway` is imported (argparse reads it again for --help)."""
    for at, arg in enumerate(argv):
        if arg == "--src" and at + 1 < len(argv):
            return argv[at + 1]
        if arg.startswith("--src="):
            return arg.split("=", 1)[1]
    return None


if __name__ == "__main__":
    use_checkout(_early_src(sys.argv))

import gateway  # noqa: E402
import gateway.api.chat as chat  # noqa: E402
import gateway.app as gateway_app  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.settings import Settings  # noqa: E402

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
REPLY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'


async def _fixed_reply(ctx: Any, services: Any) -> Response:
    return Response(REPLY, media_type="application/json")


class ChatLane:
    """The lane before the front: the innermost middleware, POST chat to `ChatEndpoint`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.endpoint = chat.ChatEndpoint()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == chat.PATH and scope["method"] == "POST":
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


async def _bare(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await Response(REPLY, media_type="application/json")(scope, receive, send)


def _scope(settings: Settings) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
        (b"authorization", b"Bearer anything"),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 4000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "root_path": "",
        "state": {"services": SimpleNamespace(settings=settings)},
    }


async def _round(app: Any, template: dict[str, Any], requests: int) -> float:
    """Microseconds of this process's CPU per request over `requests` requests."""
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.process_time()
    for _ in range(requests):
        scope = dict(template)
        scope["state"] = dict(template["state"])
        await app(scope, receive, send)
    spent = time.process_time() - started
    if set(statuses) != {200}:
        raise RuntimeError(f"the stack answered {sorted(set(statuses))}, not 200")
    return spent / requests * 1e6


def _apps(settings: Settings) -> dict[str, Any]:
    chat.handle_chat = _fixed_reply  # only the front is timed
    front = create_app(settings)
    lane = create_app(settings)
    lane.lanes = {}
    lane.user_middleware.append(Middleware(ChatLane))  # innermost
    route = create_app(settings)
    route.lanes = {}
    kept = gateway_app.NO_FASTAPI_TELEMETRY
    gateway_app.NO_FASTAPI_TELEMETRY = {}  # FastAPI's default: its telemetry on
    try:
        telemetry = create_app(settings)
    finally:
        gateway_app.NO_FASTAPI_TELEMETRY = kept
    telemetry.lanes = {}
    return {
        "front": front,
        "lane": lane,
        "fastapi-route": route,
        "fastapi-route+telemetry": telemetry,
        "bare": _bare,
    }


async def _measure(requests: int, rounds: int, only: set[str]) -> dict[str, list[float]]:
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="farebox-front-")))
    template = _scope(settings)
    apps = {name: app for name, app in _apps(settings).items() if not only or name in only}
    results: dict[str, list[float]] = {name: [] for name in apps}
    for app in apps.values():
        await _round(app, template, min(requests, 300))  # warm-up
    for _ in range(rounds):  # interleaved: a noisy box slows every variant alike
        for name, app in apps.items():
            results[name].append(await _round(app, template, requests))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--only", default="", help="comma-separated variants to run")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    measure = _measure(args.requests, args.rounds, only)
    if args.uvloop:
        import uvloop

        results = uvloop.run(measure)
    else:
        results = asyncio.run(measure)
    print(f"gateway: {gateway.__file__}")
    print("| stack in front of handle_chat | best us/req | median us/req |")
    print("| --- | --- | --- |")
    for name, spent in results.items():
        print(f"| {name} | {min(spent):.1f} | {statistics.median(spent):.1f} |")


if __name__ == "__main__":
    main()
