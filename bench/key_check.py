"""Benchmark what the auth middleware adds per request, for a virtual key, at p50.

Run: `python bench/key_check.py` (`--rounds N`, `--no-write` to skip writing
bench/results/key_check.md). One process, one event loop, two measurements:

1. The middleware alone: `AuthMiddleware` around an app that answers nothing, called with
   a virtual key's `Authorization` header, against that same inner app called directly.
2. The whole gateway over ASGI (every middleware and the router; no sockets, so network
   noise does not drown microseconds): `GET /v1/chat/completions` on a gateway with an
   admin key, called with a virtual key (authenticated and allowed, then the router's
   405), against the same gateway built without one (open mode). A 405, because every
   read route resolves `ServicesDep`, a sync dependency FastAPI runs in a worker thread:
   that hop (hundreds of µs, jittery on a shared box) would drown the difference here.

3. The middleware's own time inside the whole app of 2: from entering it to entering the
   app it wraps (its code runs colder there than in 1, between FastAPI's routing).

Both pairs run interleaved (one of each per round), so drift on the shared dev box hits
both sides alike. The key comes from the real key cache (`services.keys`, built by the
lifespan on a SQLite ledger): a lookup is a SHA-256 and a dict read, no database trip.
The issue's target: under 50 microseconds added at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.app import create_app
from gateway.auth.middleware import AuthMiddleware
from gateway.config import parse_config
from gateway.keys.model import KeyAttributes
from gateway.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "key_check.md"
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
TARGET_US = 50.0
PATH = "/v1/chat/completions"  # GET: 405, after auth
CONFIG = "models:\n  chat:\n    model: m\n    base_url: http://127.0.0.1:9/v1\n    family: vllm\n"

Call = Callable[[], Awaitable[None]]


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: Any) -> None:
    return None


def _scope(app: Any, path: str, key: str | None, state: dict[str, Any]) -> dict[str, Any]:
    headers = [(b"host", b"bench"), (b"user-agent", b"bench")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 4000), "app": app, "state": dict(state),
    }  # fmt: skip


async def _started(stack: AsyncExitStack, settings: Settings) -> tuple[Any, dict[str, Any]]:
    """A gateway app with its lifespan running, and the lifespan's state."""
    app = create_app(settings, parse_config(CONFIG))
    state = await stack.enter_async_context(app.router.lifespan_context(app))
    return app, dict(state or {})


async def _timed_pair(a: Call, b: Call, rounds: int) -> tuple[list[float], list[float]]:
    """Microseconds per call of `a` and of `b`, interleaved, after a warm-up."""
    for _ in range(min(rounds, 500)):
        await a()
        await b()
    times_a, times_b = [], []
    clock = time.perf_counter_ns
    for round_ in range(rounds):
        first, second = (a, b) if round_ % 2 else (b, a)  # neither always runs warmer
        start = clock()
        await first()
        middle = clock()
        await second()
        end = clock()
        one, other = (middle - start) / 1000, (end - middle) / 1000
        times_a.append(one if first is a else other)
        times_b.append(other if first is a else one)
    return times_a, times_b


async def measure(rounds: int, data_dir: Path) -> dict[str, tuple[float, float]]:
    """p50 (µs) with and without auth: the middleware alone, and the whole app."""
    async with AsyncExitStack() as stack:
        keyed_settings = Settings(admin_key=ADMIN_KEY, data_dir=data_dir / "keyed")  # type: ignore[arg-type]
        keyed, keyed_state = await _started(stack, keyed_settings)
        open_app, open_state = await _started(stack, Settings(data_dir=data_dir / "open"))
        services = keyed_state["services"]
        made = await services.keys.store.create(KeyAttributes(team="bench", role="member"))
        services.keys.put(made.record)
        secret = made.secret

        async def inner(scope: Any, receive: Any, send: Any) -> None:
            return None

        middleware = AuthMiddleware(inner, admin_key=keyed_settings.admin_key)
        scope = _scope(keyed, PATH, secret, keyed_state)

        async def with_auth() -> None:
            await middleware(dict(scope), _receive, _send)

        async def without() -> None:
            await inner(dict(scope), _receive, _send)

        mw = await _timed_pair(with_auth, without, rounds)

        async def keyed_call() -> None:
            await keyed(_scope(keyed, PATH, secret, keyed_state), _receive, _send)

        async def open_call() -> None:
            await open_app(_scope(open_app, PATH, None, open_state), _receive, _send)

        await keyed_call()  # builds each app's middleware stack
        await open_call()
        keyed_marks, open_marks = _instrument(keyed), _instrument(open_app)
        whole = await _timed_pair(keyed_call, open_call, rounds)
        return {
            "middleware alone": (statistics.median(mw[0]), statistics.median(mw[1])),
            f"whole app, GET {PATH} (405)": (
                statistics.median(whole[0]),
                statistics.median(whole[1]),
            ),
            "the middleware inside the whole app": (_own(keyed_marks), _own(open_marks)),
        }


def _instrument(app: Any) -> list[int]:
    """Clock readings on entering the app's AuthMiddleware and the app it wraps, in pairs."""
    parent: Any = None
    node: Any = app.middleware_stack  # built by the app's first call
    while not isinstance(node, AuthMiddleware):
        parent, node = node, node.app
    marks: list[int] = []
    inner, clock = node.app, time.perf_counter_ns

    async def entered_inner(scope: Any, receive: Any, send: Any) -> None:
        marks.append(clock())
        await inner(scope, receive, send)

    async def entered_auth(scope: Any, receive: Any, send: Any) -> None:
        marks.append(clock())
        await node(scope, receive, send)

    node.app, parent.app = entered_inner, entered_auth
    return marks


def _own(marks: list[int]) -> float:
    """p50 (µs) from entering the middleware to entering the app it wraps."""
    pairs = zip(marks[::2], marks[1::2], strict=True)
    return statistics.median([(end - start) / 1000 for start, end in pairs][-(len(marks) // 4) :])


def report(results: dict[str, tuple[float, float]], rounds: int) -> str:
    lines = [
        "# Key check: what auth adds per request (virtual key, p50)",
        "",
        f"`python bench/key_check.py --rounds {rounds}` on {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs (shared dev box). "
        f"Target: under {TARGET_US:.0f} µs added at p50.",
        "",
        "| Measurement | with auth p50 (µs) | without p50 (µs) | added (µs) |",
        "|---|---|---|---|",
    ]
    for name, (with_auth, without) in results.items():
        lines.append(f"| {name} | {with_auth:.1f} | {without:.1f} | {with_auth - without:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        results = asyncio.run(measure(args.rounds, Path(data_dir)))
    text = report(results, args.rounds)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)
    with_auth, without = results["the middleware inside the whole app"]
    verdict = "meets" if with_auth - without < TARGET_US else "MISSES"
    print(f"auth adds {with_auth - without:.1f} µs at p50 inside the app: {verdict} the target")


if __name__ == "__main__":
    main()
