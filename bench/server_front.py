"""CPU per request of the HTTP server and the chat front, from request bytes to reply bytes.

Drives `farebox serve`'s server stack in-process with no sockets: the protocol class
`gateway.server.server_config` builds (uvicorn's httptools protocol with Farebox's
guard, `HeadWithBody`), uvicorn's app wrapping (its proxy-headers layer) and the real
app (`create_app`: `Gateway`, the chat path's `Front`, auth, body guard), on uvloop, with the
pipeline's `handle_chat` replaced by a fixed reply, so only the layers in front of and
behind the pipeline are timed. Each request's bytes go to the protocol's
`data_received`, as the loop hands them over; the transport is a stand-in that keeps
what is written (no send syscall: that cost is the kernel's and every server pays it).

- whole: a JSON reply with a content-length (as `handle_chat` answers a whole request);
- `--stream`: a text/event-stream reply, head then `--events` events then the end,
  each a `http.response.body` message (as a stream's relay sends them).

  .venv/bin/python bench/server_front.py [--stream] [--requests 3000] [--rounds 5]
      [--src CHECKOUT]

`--src` imports the gateway from another checkout (an A/B of two trees: run each side
alternately). Prints one JSON line: the best and the median round, microseconds of the
loop thread's CPU (thread_time) per request.

`--ab BASE` runs BASE's server and chat front (`AB_MODULES`: server.py, http_cycle.py,
front.py, body_guard.py, api/chat.py, request_id.py, http_headers.py, json_body.py)
beside this tree's in one process (the rest of `gateway` is this tree's), rounds
alternating, and prints both sides and how many rounds this tree was faster: on a loaded
box the two sides share the load, where separate runs minutes apart do not.

`--callgrind` runs the bench under `valgrind --tool=callgrind` with instrumentation on
only around one measured round (`callgrind_control -i`), and prints the loop thread's
instructions per request instead (~5 minutes at `--requests 600`). The count includes
the loop's timer work (the lifespan's periodic tasks), which grows with wall time, and
valgrind's wall time grows with the box's load: two runs of one tree read 444,261 and
404,525 here, so read single counts as +-10%, not as exact.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]


def _early_src(argv: list[str]) -> str | None:
    """`--src`, read before `gateway` is imported."""
    for at, arg in enumerate(argv):
        if arg == "--src" and at + 1 < len(argv):
            return argv[at + 1]
    return None


if __name__ == "__main__":
    use_checkout(_early_src(sys.argv))

import uvloop  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

import gateway  # noqa: E402
import gateway.api.chat as chat  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.heap import freeze_imports  # noqa: E402
from gateway.server import server_config  # noqa: E402
from gateway.settings import Settings  # noqa: E402

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:4000\r\n"
    b"accept: application/json\r\ncontent-type: application/json\r\n"
    b"user-agent: OpenAI/Python 1.0\r\nauthorization: Bearer anything\r\n"
    b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)
REPLY = b'{"id":"chatcmpl-1","object":"chat.completion","choices":[]}'
EVENT = b'data: {"id":"chatcmpl-1","choices":[{"delta":{"content":"hi"}}]}\n\n'


class Reply:
    """A pipeline reply: the chat path's headers, then the body in one or more messages."""

    def __init__(self, request_id: str, events: int) -> None:
        self.request_id = request_id
        self.events = events
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [
            (b"x-request-id", self.request_id.encode()),
            (b"x-farebox-cost-usd", b"0.000001"),
            (b"x-farebox-model", b"m"),
        ]
        if not self.events:
            headers += [
                (b"content-length", b"%d" % len(REPLY)),
                (b"content-type", b"application/json"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": REPLY})
            return
        headers += [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(self.events):
            await send({"type": "http.response.body", "body": EVENT, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


class Transport(asyncio.Transport):
    """Keeps the bytes written; `done` is set when a reply's last bytes are in."""

    def __init__(self, stream: bool) -> None:
        super().__init__()
        self.end = b"0\r\n\r\n" if stream else REPLY
        self.done: asyncio.Future[None] | None = None
        self.written = 0
        self.closing = False

    def _wrote(self, data: bytes) -> None:
        self.written += len(data)
        if data.endswith(self.end) and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def write(self, data: Any) -> None:
        self._wrote(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self._wrote(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 4000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


CALLGRIND = False  # set under valgrind: instrument the measured rounds only


def _instrument(on: bool) -> None:
    command = ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


async def _round(protocol: Any, transport: Transport, requests: int, measured: bool) -> float:
    """Microseconds of the loop thread's CPU per request over `requests` requests."""
    loop = asyncio.get_running_loop()
    if CALLGRIND and measured:
        _instrument(True)
    started = time.thread_time()
    for _ in range(requests):
        transport.done = loop.create_future()
        protocol.data_received(REQUEST)
        await transport.done
    spent = (time.thread_time() - started) / requests * 1e6
    if CALLGRIND and measured:
        _instrument(False)
    return spent


# The modules of the server and the chat front that `--ab` takes from the base checkout.
AB_MODULES = (
    "request_id",
    "http_headers",
    "json_body",
    "http_cycle",
    "body_guard",
    "server",
    "api.chat",
    "front",
)


def _base_modules(base: str) -> dict[str, Any]:
    """BASE's `AB_MODULES`, loaded beside this tree's under other names.

    Each is loaded as `farebox_base_<name>`; what it imports from another of them is
    then rebound to that one's base version (`from gateway.http_cycle import Cycle` in
    the base server.py is the base Cycle), and everything else is this tree's `gateway`,
    so only these modules differ between the two sides.
    """
    loaded: dict[str, Any] = {}
    for name in AB_MODULES:
        spec = importlib.util.spec_from_file_location(
            f"farebox_base_{name.replace('.', '_')}",
            Path(base) / "gateway" / (name.replace(".", "/") + ".py"),
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        loaded[f"gateway.{name}"] = module
    for module in loaded.values():
        for attr, value in list(vars(module).items()):
            home = loaded.get(getattr(value, "__module__", None) or "")
            if home is not None and hasattr(home, attr):
                setattr(module, attr, getattr(home, attr))
    return loaded


async def _measure_ab(requests: int, rounds: int, events: int, base: str) -> dict[str, list[float]]:
    """Both sides in one process, rounds alternating: a loaded box slows both alike."""
    modules = _base_modules(base)
    base_server, base_front = modules["gateway.server"], modules["gateway.front"]

    async def fixed(ctx: Any, services: Any) -> Reply:
        return Reply(ctx.request_id, events)

    chat.handle_chat = fixed
    modules["gateway.api.chat"].handle_chat = fixed
    freeze_imports()
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="farebox-server-front-")))
    app = create_app(settings)
    new_front = app.lanes[chat.PATH]
    # A base tree before the model routes' fronts (`Gateway.chat`, `chat_path`,
    # `ChatFront`) reads these two; this tree reads `lanes`.
    app.chat, app.chat_path = new_front, chat.PATH  # type: ignore[attr-defined]
    guard = new_front.guard
    base_guard = modules["gateway.body_guard"].BodyGuard(
        guard.app,
        prompt_limit=guard.prompt_limit,
        api_limit=guard.api_limit,
        timeout_s=guard.timeout_s,
    )
    if hasattr(base_front, "ChatFront"):
        old_front = base_front.ChatFront(app.state.in_flight, new_front.auth, base_guard)
    else:
        base_answer = modules["gateway.api.chat"].answer
        old_front = base_front.Front(app.state.in_flight, new_front.auth, base_guard, base_answer)
    sides: dict[str, tuple[Any, Any]] = {}
    for name, module in (("base", base_server), ("new", sys.modules["gateway.server"])):
        config = module.server_config(app, settings, log_level="warning")
        config.load()
        sides[name] = (config, old_front if name == "base" else new_front)
    spent: dict[str, list[float]] = {"base": [], "new": []}
    async with app.router.lifespan_context(app) as lifespan_state:
        running = {}
        for name, (config, _) in sides.items():
            protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=ServerState(), app_state=dict(lifespan_state or {})
            )
            transport = Transport(stream=bool(events))
            protocol.connection_made(transport)
            running[name] = (protocol, transport)
        for at in range(rounds + 1):
            order = ("base", "new") if at % 2 else ("new", "base")
            for name in order:
                app.chat = app.lanes[chat.PATH] = sides[name][1]  # type: ignore[attr-defined]
                protocol, transport = running[name]
                took = await _round(
                    protocol, transport, min(requests, 300) if at == 0 else requests, at > 0
                )
                if at:
                    spent[name].append(took)
        for protocol, _ in running.values():
            protocol.connection_lost(None)
    return spent


async def _measure(requests: int, rounds: int, events: int) -> list[float]:
    async def fixed(ctx: Any, services: Any) -> Reply:
        return Reply(ctx.request_id, events)

    chat.handle_chat = fixed  # only the server and the front are timed
    freeze_imports()  # the collector as `farebox serve` sets it (gateway.heap)
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="farebox-server-front-")))
    app = create_app(settings)
    config = server_config(app, settings, log_level="warning")
    config.load()
    state = ServerState()
    async with app.router.lifespan_context(app) as lifespan_state:
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=state, app_state=dict(lifespan_state or {})
        )
        transport = Transport(stream=bool(events))
        protocol.connection_made(transport)
        await _round(protocol, transport, min(requests, 300), False)  # warm-up
        spent = [await _round(protocol, transport, requests, True) for _ in range(rounds)]
        protocol.connection_lost(None)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--events", type=int, default=20, help="events per stream")
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--callgrind", action="store_true", help="count instructions instead")
    parser.add_argument("--ab", help="checkout whose server.py and front.py run beside this tree's")
    parser.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind:
        print(json.dumps(_callgrind(args)))
        return
    global CALLGRIND
    CALLGRIND = args.under_callgrind
    events = args.events if args.stream else 0
    if args.ab:
        both = uvloop.run(_measure_ab(args.requests, args.rounds, events, args.ab))
        row: dict[str, Any] = {"base": args.ab, "stream": args.stream}
        for name, times in both.items():
            row[name] = {"best": round(min(times), 2), "median": round(statistics.median(times), 2)}
        row["new/base medians"] = round(row["new"]["median"] / row["base"]["median"], 3)
        row["rounds new<base"] = sum(n < b for n, b in zip(both["new"], both["base"], strict=True))
        print(json.dumps(row))
        return
    spent = uvloop.run(_measure(args.requests, args.rounds, args.events if args.stream else 0))
    print(
        json.dumps(
            {
                "gateway": str(Path(gateway.__file__).parent.parent),
                "stream": args.stream,
                "us_per_req_best": round(min(spent), 2),
                "median": round(statistics.median(spent), 2),
            }
        )
    )


def _callgrind(args: argparse.Namespace) -> dict[str, Any]:
    """Run this bench under callgrind, one measured round; instructions per request."""
    out = Path(tempfile.mkdtemp(prefix="server-front-cg-")) / "cg.out"
    argv = [a for a in sys.argv[1:] if a != "--callgrind"]
    argv += ["--under-callgrind", "--rounds", "1"]
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        *argv,
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Thread 1 runs the loop; the others are start-up's (a tokenizer load, the ledger).
    loop_thread = Path(f"{out}-01").read_text()
    totals = [int(m) for m in re.findall(r"^(?:summary|totals): (\d+)", loop_thread, re.M)]
    return {
        "gateway": args.src or str(Path(__file__).resolve().parents[1]),
        "stream": args.stream,
        "instructions_per_req": round(max(totals) / args.requests),
    }


if __name__ == "__main__":
    main()
