"""CPU per request of the whole chat path, in-process, against the perf floor's mock.

Run: `python bench/pipeline_inproc.py [--stream] [--config hot] [-c 16] [-n 2000]
[--rounds 5] [--src CHECKOUT] [--cprofile out.pstats]`.

Starts `../shared/perf-floor/mock_upstream.py` on core 0, pins this process to core 1,
builds the real app (`create_app`, its lifespan: SQLite ledger and writer thread,
in-process state, metrics) and sends it bench/pipeline_cpu.py's small request through its
ASGI interface (every middleware, the chat lane, `handle_chat`, the aiohttp client to the
mock), `-c` at a time. What it leaves out of bench/pipeline_cpu.py is the HTTP server's
socket and parser; what it keeps is every stage of the pipeline and the ledger writer
(a thread of this process). CPU is `time.process_time()` (all threads) per request over
each round; the best and median of `--rounds` rounds are printed as JSON. Wall-clock noise
from neighbours on a shared box moves it much less than CPU read from /proc under load.

`--config hot` uses bench/hotpath.py's configuration (a max_tokens default, two rules,
family openai) instead of pipeline_cpu's (family vllm, no rules). `--src` imports the
gateway from another checkout (an A/B of two trees). `--cprofile` writes cProfile stats
of one more round (deterministic call counts; the times are inflated by the profiler).
`--serve-gc` freezes the imported heap and sets the young-generation threshold as `farebox
serve` does (gateway/heap.py `freeze_imports`); without it the process keeps CPython's
threshold of 700, and young collections land on whichever stage allocates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]
from hotpath_targets import FAREBOX_CONFIG  # the hot-path bench's: rules, defaults, family

ROOT = Path(__file__).resolve().parents[1]
PLAIN = """models:
  bench-gpt:
    {{provider: openai, model: mock-model, base_url: "http://127.0.0.1:{port}/v1", family: vllm}}
prices:
  bench-gpt: {{input: 1.0, output: 2.0}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _body(i: int, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": "bench-gpt",
        "messages": [{"role": "user", "content": f"Say hello (request {i})."}],
        "max_tokens": 16,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def _scope(state: dict[str, Any], body: bytes) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"user-agent", b"loadgen"),
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
        "state": dict(state),
    }


def _receive(body: bytes) -> Any:
    """`receive` of a client that sends `body` in one message and stays until the reply is over."""
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _one(app: Any, state: dict[str, Any], body: bytes, statuses: list[int]) -> None:
    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(_scope(state, body), _receive(body), send)


async def _round(app: Any, state: dict[str, Any], n: int, c: int, stream: bool) -> float:
    """Microseconds of this process's CPU per request over `n` requests, `c` at a time."""
    statuses: list[int] = []
    bodies = [_body(i, stream) for i in range(n)]
    queue = iter(bodies)

    async def worker() -> None:
        for body in queue:
            await _one(app, state, body, statuses)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(c)))
    spent = time.process_time() - started
    if set(statuses) != {200}:
        raise RuntimeError(f"the gateway answered {sorted(set(statuses))}, not 200")
    return spent / n * 1e6


@contextlib.asynccontextmanager
async def last_request(
    port: int, config_name: str, stream: bool, prefix: str
) -> AsyncIterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """The app, its lifespan's state and what its 50th request left (`ctx`, `meter`,
    `services`, the reply's `payload`, `raw` and `reply_kwargs`), inside its lifespan.

    The app is built on a data folder of its own (`prefix`), with bench/hotpath.py's
    configuration (`config_name` "hot") or PLAIN's, against the mock on `port`; it serves
    50 requests one at a time while `bill` and `with_cost` of the whole and streamed reply
    paths (chat, relay) keep their arguments: a reply is billed before it is sent and
    booked after, so the context is copied before its release."""
    import gateway.pipeline.chat as chat
    import gateway.pipeline.relay as relay
    from gateway.app import create_app
    from gateway.settings import Settings

    kept: dict[str, Any] = {}
    bill, reply_cost = chat.bill, chat.with_cost

    async def keep_bill(ctx: Any, meter: Any, services: Any, **kwargs: Any) -> Any:
        booking = await bill(ctx, meter, services, **kwargs)
        kept.update(ctx=copy.copy(ctx), meter=meter, services=services)
        return booking

    def keep_reply(payload: Any, raw: bytes, ctx: Any, **kwargs: Any) -> bytes:
        kept.update(payload=payload, raw=raw, reply_kwargs=kwargs)
        return reply_cost(payload, raw, ctx, **kwargs)

    data = Path(tempfile.mkdtemp(prefix=prefix))
    base = f"http://127.0.0.1:{port}/v1"
    hot = FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
    (data / "config.yaml").write_text(hot if config_name == "hot" else PLAIN.format(port=port))
    app = create_app(Settings(data_dir=data, config=data / "config.yaml", log_level="warning"))
    async with app.router.lifespan_context(app) as given:
        state = dict(given or {})
        chat.bill, chat.with_cost = keep_bill, keep_reply
        relay.bill, relay.with_cost = keep_bill, keep_reply  # a stream's
        try:
            await _round(app, state, 50, 1, stream)
        finally:
            chat.bill, chat.with_cost = bill, reply_cost
            relay.bill, relay.with_cost = bill, reply_cost
        yield app, state, kept


async def _run(args: argparse.Namespace, port: int) -> dict[str, Any]:
    from gateway.app import create_app
    from gateway.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="farebox-inproc-"))
    config = data / "config.yaml"
    base = f"http://127.0.0.1:{port}/v1"
    hot = FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
    config.write_text(hot if args.config == "hot" else PLAIN.format(port=port))
    settings = Settings(data_dir=data, config=config, log_level="warning")
    if args.serve_gc:  # as gateway/cli.py does before the server starts
        from gateway.heap import freeze_imports

        freeze_imports()
    app = create_app(settings)
    rounds: list[float] = []
    async with app.router.lifespan_context(app) as given:
        state = dict(given or {})
        await _round(app, state, args.warm, args.c, args.stream)
        for _ in range(args.rounds):
            rounds.append(await _round(app, state, args.n, args.c, args.stream))
        if args.cprofile:
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
            await _round(app, state, args.n, args.c, args.stream)
            profile.disable()
            profile.dump_stats(args.cprofile)
    return {
        "stream": args.stream,
        "config": args.config,
        "c": args.c,
        "n": args.n,
        "us_per_req_rounds": [round(r, 1) for r in rounds],
        "best": round(min(rounds), 1),
        "median": round(statistics.median(rounds), 1),
    }  # the ledger's files in `data` are left for a look; the OS cleans /tmp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("-c", type=int, default=16)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--config", choices=("plain", "hot"), default="plain")
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--cprofile", help="write cProfile stats of one more round here")
    parser.add_argument(
        "--serve-gc",
        action="store_true",
        help="freeze the imports and raise the young GC threshold as `farebox serve` does",
    )
    args = parser.parse_args()
    use_checkout(args.src)
    os.environ.pop("FAREBOX_CONFIG", None)
    port = _free_port()
    mock_command = [sys.executable, str(args.floor / "mock_upstream.py"), "--port", str(port)]
    mock = subprocess.Popen(
        ["taskset", "-c", "0", *mock_command],
        stdout=subprocess.DEVNULL,
    )
    try:
        os.sched_setaffinity(0, {1})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        try:
            import uvloop
        except ImportError:
            result = asyncio.run(_run(args, port))
        else:
            result = uvloop.run(_run(args, port))
        print(json.dumps(result))
    finally:
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    main()
