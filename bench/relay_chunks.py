"""CPU per streamed chunk of the chat relay's reading and metering: full walk and short path.

Run: `python bench/relay_chunks.py [--tokens 16] [--rounds 5] [--n 20000] [--tier T] [--reads]`.

Builds the events the perf-floor mock upstream sends for one stream (role chunk, one chunk
per token, the finish chunk, the usage chunk; `--tier` adds OpenAI's `service_tier` to each)
and times, in this process (CPU time, best of `--rounds`), what `Relay._outgoing` does per
event without a thinking cap, two ways:

- full: every chunk parsed, shape-checked, checked for an error and walked by
  `Meter.observe_chunk` (the relay before the short path);
- short: `line_data`, `read_chunk`, and `Meter.observe_content` for plain content chunks
  (tests/unit/test_relay_plain_chunks.py checks that both leave the same meter);
- native: `PLAIN_EVENT` (gateway/upstream/_plain_event.c) reads a
  plain content chunk's content and tier in one native pass, and every other event goes
  the short way (absent when the native module is not built).
- native_runs: what the relay does now: native, with the plain chunks of a run (those
  one read brought, up to the next other event) metered in one `Meter.observe_contents`.

Prints one JSON object: µs per stream and per event for each, and the saving per stream.

`--reads` also times how one stream's bytes, arriving in one read of a real aiohttp
`StreamReader` (the mock writes a stream at once), become the messages the response
sends, each written to a local socket (one `send` syscall, as uvicorn's transport does
when its buffer is empty; a thread drains the other end, and only the relaying thread's
CPU is timed), two ways:

- per event: `iter_events` over `iter_any()` (two async generators per event, the relay's
  reading before batches) and one write per event;
- per read: `SseEvents.batch()` (one await per read) and one write of the joined events.
Only the reading and the writes: not the ASGI send wrappers each message also went through.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.pipeline.measure import Meter
from gateway.upstream.replies import (
    PLAIN_EVENT,
    chunk_object,
    error_in_chunk,
    line_data,
    read_chunk,
)
from gateway.upstream.sse import DONE, event_data, iter_events


def _events(tokens: int, tier: str | None) -> list[bytes]:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": "chatcmpl-mock12345",
            "object": "chat.completion.chunk",
            "created": 1764547200,
            "model": "mock-model",
        }
        if tier is not None:
            body["service_tier"] = tier
        body["choices"] = (
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
            if delta is not None
            else []
        )
        return b"data: " + orjson.dumps(body | extra) + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": f" tok{i}"}) for i in range(tokens)]
    events.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}
    events.append(chunk(None, usage=usage))
    return [*events, b"data: [DONE]\n\n"]


def _full(events: list[bytes]) -> None:
    meter = Meter()
    for event in events:
        data = event_data(event)
        if data is not None and data.strip() == DONE:
            return
        chunk = chunk_object(event, "bench")
        if chunk is not None and error_in_chunk(chunk, "bench") is None:
            meter.observe_chunk(chunk)


def _short(events: list[bytes]) -> None:
    meter = Meter()
    for event in events:
        data = line_data(event)
        if data is None:
            data = event_data(event)
        if data is not None and data[:1] != b"{" and data.strip() == DONE:
            return
        chunk, content = read_chunk(data, "bench")
        if chunk is None:
            continue
        if content is not None:
            meter.observe_content(content, chunk.get("service_tier"))
        elif error_in_chunk(chunk, "bench") is None:
            meter.observe_chunk(chunk)


def _native(events: list[bytes]) -> None:
    meter, plain = Meter(), PLAIN_EVENT
    assert plain is not None
    for event in events:
        if (found := plain(event)) is not None:
            meter.observe_content(*found)
            continue
        data = line_data(event)
        if data is None:
            data = event_data(event)
        if data is not None and data[:1] != b"{" and data.strip() == DONE:
            return
        chunk, content = read_chunk(data, "bench")
        if chunk is None:
            continue
        if content is not None:
            meter.observe_content(content, chunk.get("service_tier"))
        elif error_in_chunk(chunk, "bench") is None:
            meter.observe_chunk(chunk)


def _native_runs(events: list[bytes]) -> None:
    """`_native` with a read's run of plain chunks metered in one `observe_contents` (the
    relay since the second streams pass): two clock readings a run, not one a chunk."""
    meter, plain = Meter(), PLAIN_EVENT
    assert plain is not None
    run: list[tuple[str, Any]] = []
    run_at: float | None = None
    for event in events:
        if (found := plain(event)) is not None:
            if run_at is None and found[0]:
                run_at = meter.clock()
            run.append(found)
            continue
        if run:
            meter.observe_contents(run, run_at)
            run, run_at = [], None
        data = line_data(event)
        if data is None:
            data = event_data(event)
        if data is not None and data[:1] != b"{" and data.strip() == DONE:
            return
        chunk, content = read_chunk(data, "bench")
        if chunk is None:
            continue
        if content is not None:
            meter.observe_content(content, chunk.get("service_tier"))
        elif error_in_chunk(chunk, "bench") is None:
            meter.observe_chunk(chunk)


def _best_us(run: Any, events: list[bytes], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(n):
            run(events)
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


async def _per_event(content: Any, out: socket.socket) -> int:
    sends = 0
    async for event in iter_events(content.iter_any()):
        out.send(event)
        sends += 1
    return sends


async def _per_read(content: Any, out: socket.socket) -> int:
    from gateway.upstream.http_stream import SseEvents  # only in trees that batch reads

    events, sends = SseEvents(content, "bench"), 0
    while batch := await events.batch():
        out.send(batch[0] if len(batch) == 1 else b"".join(batch))
        sends += 1
    return sends


def _drain(sock: socket.socket) -> None:
    with sock:
        while sock.recv(1 << 20):
            pass


def _reads_us(
    read: Callable[[Any, socket.socket], Awaitable[int]], body: bytes, n: int, rounds: int
) -> tuple[float, int]:
    """CPU µs per stream: `body` in one read of a StreamReader, relayed to a socket."""
    import aiohttp
    from aiohttp.base_protocol import BaseProtocol

    async def run() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        best, sends = float("inf"), 0
        out, back = socket.socketpair()
        drain = threading.Thread(target=_drain, args=(back,), daemon=True)
        drain.start()  # reads the other end meanwhile: this thread's CPU is not timed
        with out:
            for _ in range(rounds):
                spent = 0.0
                for _ in range(n):
                    content = aiohttp.StreamReader(BaseProtocol(loop), 2**16, loop=loop)
                    content.feed_data(body)
                    content.feed_eof()
                    start = time.thread_time()
                    sends = await read(content, out)
                    spent += time.thread_time() - start
                best = min(best, spent / n * 1e6)
        drain.join()
        return best, sends

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--tier", default=None, help="a service_tier in every chunk")
    parser.add_argument("--reads", action="store_true", help="also time reads into messages")
    args = parser.parse_args()
    events = _events(args.tokens, args.tier)
    out: dict[str, Any] = {"tokens": args.tokens, "events": len(events), "tier": args.tier}
    runs: list[tuple[str, Any]] = [("full", _full), ("short", _short)]
    if PLAIN_EVENT is not None:
        runs.append(("native", _native))
        if hasattr(Meter, "observe_contents"):  # trees since the second streams pass
            runs.append(("native_runs", _native_runs))
    for name, run in runs:
        per_stream = _best_us(run, events, args.n, args.rounds)
        out[name] = {"us_per_stream": round(per_stream, 2)}
        out[name]["us_per_event"] = round(per_stream / len(events), 3)
    out["saved_us_per_stream"] = round(
        out["full"]["us_per_stream"] - out["short"]["us_per_stream"], 2
    )
    if "native" in out:
        out["native_saved_us_per_stream"] = round(
            out["short"]["us_per_stream"] - out["native"]["us_per_stream"], 2
        )
    if args.reads:
        body = b"".join(events)
        for name, read in (("per_event", _per_event), ("per_read", _per_read)):
            per_stream, sends = _reads_us(read, body, args.n // 4, args.rounds)
            out[name] = {"us_per_stream": round(per_stream, 2), "writes": sends}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
