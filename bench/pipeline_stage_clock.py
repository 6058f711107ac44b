"""Time per stage of a c=1 request in-process, and of its spans from bytes in to booked.

Run: `python bench/pipeline_stage_clock.py [--config plain|hot] [-n 2000] [--rounds 3]
[--stream] [--src CHECKOUT] [--wrap module.function ...]`.

Builds the app as bench/pipeline_inproc.py does (its lifespan, the perf floor's mock on
core 0, this process on core 1, the heap frozen as `farebox serve` does), sends requests
one at a time and wraps each stage `handle_chat` calls before the upstream call in a
clock. At concurrency 1 nothing else runs on the loop while a stage runs, so an awaited
stage's span is its own work. The clock is `time.perf_counter` (the thread's CPU clock is
a system call costing ~0.6 µs on this box), and a request the OS preempted is left out by
taking medians over the requests. Prints, per round, the median µs of each stage and of
the spans `front` (the ASGI call to `handle_chat`), `to_upstream` (`handle_chat` to the
upstream request written), `upstream_wait` (to its reply's first bytes), `reply_to_body`
(to the response's first body bytes sent: a stream's first event), `reply_to_token` (to
the first body bytes that carry a content token: a stream's time to first token),
`after_body` (the rest of the response and the booking) and `stages_sum`; then the median
of the rounds. The first round only warms the caches. Each wrapper adds two clock reads
(~0.1 µs). `--wrap module.function` (or `module.Class.method`, repeatable; not a class
that is checked with `isinstance`) clocks a stage's parts too, reported as `+name` and
left out of `stages_sum`; wrap a name where its caller looks it up
(`gateway.pipeline.chat.bill`).
At c=1 each stage runs with the caches cold from the wait before it, so stages cost 2-4x
what bench/pipeline_parts.py's loops of one stage say.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]

CHAT_STAGES = (
    "parse_request",
    "identify",
    "decide",
    "entitle",
    "claim_task",
    "apply_task_policy",
    "apply_policy",
    "plan_now",  # 36f718d: the three above, as chat calls them now
    "plan_task",
    "capabilities",
    "rule_for_route",
    "start_prefix_check",
    "_build_call",
)
FIRST_TOKEN = re.compile(rb'"content":"[^"]')
"""A body message that carries a content token (a stream's first event is its role chunk,
whose content is empty: loadgen's TTFT, and bench/hotpath.py's, is to the first token)."""
clock = time.perf_counter  # thread_time is a system call here (~0.6 µs), this ~0.05


class Clocks:
    """Each request's time per stage, and the marks of its spans."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.marks: dict[str, float] = {}
        self.requests: list[dict[str, float]] = []

    def add(self, name: str, seconds: float) -> None:
        self.current[name] = self.current.get(name, 0.0) + seconds

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, clock())

    def close_request(self) -> None:
        marks, now, spent = self.marks, clock(), self.current
        spent["stages_sum"] = sum(s for name, s in spent.items() if not name.startswith("+"))
        spent["front"] = marks["chat"] - marks["asgi"]
        spent["to_upstream"] = marks["sent"] - marks["chat"]
        spent["upstream_wait"] = marks["reply"] - marks["sent"]
        spent["reply_to_body"] = marks["body"] - marks["reply"]
        if "token" in marks:
            spent["reply_to_token"] = marks["token"] - marks["reply"]
        spent["after_body"] = now - marks["body"]
        self.requests.append(spent)
        self.current, self.marks = {}, {}

    def report(self) -> dict[str, float]:
        """The median µs of each stage over the requests (a preempted one does not count)."""
        names = sorted(self.requests[-1])
        return {
            name: round(statistics.median(r.get(name, 0.0) for r in self.requests) * 1e6, 2)
            for name in names
        }


def _timed(clocks: Clocks, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    if asyncio.iscoroutinefunction(func):

        @functools.wraps(func)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return await func(*args, **kwargs)
            finally:
                clocks.add(name, clock() - started)

        return timed_async

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return func(*args, **kwargs)
        finally:
            clocks.add(name, clock() - started)

    return timed


def _wrap_inner(clocks: Clocks, target: str) -> None:
    """Clock `module.attr` or `module.Class.attr` too (reported as `+attr`, not summed)."""
    import importlib

    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        name = parts[-1]
        setattr(owner, name, _timed(clocks, "+" + ".".join(parts[cut:]), getattr(owner, name)))
        return
    raise ValueError(f"--wrap {target}: no such module")


def _instrument(clocks: Clocks, inner: list[str]) -> None:
    for target in inner:
        _wrap_inner(clocks, target)
    import gateway.pipeline.chat as chat
    from gateway.pipeline import quota
    from gateway.upstream import h1

    for name in CHAT_STAGES:
        if hasattr(chat, name):  # a tree of another pass may name its stages otherwise
            setattr(chat, name, _timed(clocks, name, getattr(chat, name)))
    for name in ("reserve", "limits_of", "hold"):  # chat calls the last two where they exist
        if hasattr(quota, name):
            setattr(quota, name, _timed(clocks, f"quota.{name}", getattr(quota, name)))
    handle_chat = chat.handle_chat

    async def marked_handle_chat(*args: Any, **kwargs: Any) -> Any:
        clocks.mark("chat")
        return await handle_chat(*args, **kwargs)

    chat.handle_chat = marked_handle_chat
    import gateway.api.chat as api_chat

    if getattr(api_chat, "handle_chat", None) is handle_chat:
        api_chat.handle_chat = marked_handle_chat
    send, write = h1.Connection.send, h1.Connection.write

    def marked_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        clocks.mark("sent")
        return send(self, *args, **kwargs)

    def marked_write(self: Any, *args: Any, **kwargs: Any) -> Any:
        clocks.mark("sent")  # a body in hand is written without `send`'s coroutine
        return write(self, *args, **kwargs)

    h1.Connection.send = marked_send
    h1.Connection.write = marked_write
    data_received = h1.Connection.data_received

    def marked_data_received(self: Any, data: bytes) -> Any:
        if "sent" in clocks.marks:
            clocks.mark("reply")
        return data_received(self, data)

    h1.Connection.data_received = marked_data_received


async def _one(app: Any, state: dict[str, Any], body: bytes, clocks: Clocks, inproc: Any) -> None:
    """bench/pipeline_inproc.py's request, marking when the response's first body bytes go."""

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise RuntimeError(f"the gateway answered {message['status']}, not 200")
        if message["type"] == "http.response.body" and message.get("body"):
            clocks.mark("body")
            if FIRST_TOKEN.search(message["body"]):
                clocks.mark("token")

    await app(inproc._scope(state, body), inproc._receive(body), send)


async def _rounds(inproc: Any, args: argparse.Namespace, port: int) -> list[dict[str, float]]:
    from gateway.app import create_app
    from gateway.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="farebox-stage-clock-"))
    base = f"http://127.0.0.1:{port}/v1"
    hot = inproc.FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
    (data / "config.yaml").write_text(
        hot if args.config == "hot" else inproc.PLAIN.format(port=port)
    )
    from gateway.heap import freeze_imports

    freeze_imports()  # as `farebox serve` does: young collections as in the server
    app = create_app(Settings(data_dir=data, config=data / "config.yaml", log_level="warning"))
    clocks = Clocks()
    _instrument(clocks, args.wrap)
    results = []
    async with app.router.lifespan_context(app) as given:
        state = dict(given or {})
        for number in range(args.rounds + 1):
            clocks.__init__()  # type: ignore[misc]
            bodies = [inproc._body(i, args.stream) for i in range(args.n)]
            for body in bodies:
                clocks.mark("asgi")
                await _one(app, state, body, clocks, inproc)
                clocks.close_request()
            if number:  # the first round warms the caches
                results.append(clocks.report())
    return results


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the mock upstream did not open port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or root.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--config", choices=("plain", "hot"), default="plain")
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument(
        "--wrap",
        action="append",
        default=[],
        help="also clock module.function or module.Class.method (a stage's parts)",
    )
    args = parser.parse_args()
    use_checkout(args.src)
    import pipeline_inproc as inproc

    os.environ.pop("FAREBOX_CONFIG", None)
    port = inproc._free_port()
    mock_command = [sys.executable, str(args.floor / "mock_upstream.py"), "--port", str(port)]
    mock = subprocess.Popen(["taskset", "-c", "0", *mock_command], stdout=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(0, {1})
        _wait_port(port)
        rounds = asyncio.run(_rounds(inproc, args, port))
    finally:
        mock.terminate()
        mock.wait(10)
    for result in rounds:
        print(json.dumps(result))
    names = rounds[0].keys()
    median = {name: round(statistics.median(r[name] for r in rounds), 2) for name in names}
    print(json.dumps({"src": args.src or str(root), "config": args.config, "median": median}))


if __name__ == "__main__":
    main()
