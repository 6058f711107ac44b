"""CPU of `chat.first_event` for a stream whose first event came with its reply's head.

Run: `python bench/c1_first_event.py [--n 400] [--rounds 4]` (from the checkout; it uses
tests/upstream/test_h1.py's local server). Each iteration opens a real h1 stream to a
local server that sends 20 events at once, lets the loop (uvloop) read them, then times
`first_event` (thread CPU) two ways, alternating: as the gateway calls it now (the event
taken at once when its bytes are here) and through the shared first-token deadline
(`SharedDeadlines.within(anext(...))`, as before `ready_event`). Prints µs per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.pipeline import chat
from gateway.upstream import http_stream as hs
from tests.unit.test_first_event_deadline import _call
from tests.upstream.test_h1 import WHERE, Server, chunked, request

EVENTS = [b'data: {"choices":[{"delta":{"content":"w%d"}}]}\n\n' % n for n in range(19)]
EVENTS.append(b"data: [DONE]\n\n")


async def _deadline_only(stream: hs.SseStream, events: hs.SseEvents, call: object) -> bytes:
    seconds = call.timeouts.first_token  # type: ignore[attr-defined]
    return await chat._first_event_deadlines(seconds).within(anext(events))


async def main(n: int, rounds: int) -> None:
    client = hs.HttpClient()
    call = _call(30.0)
    results: dict[str, list[float]] = {"ready": [], "deadline": []}
    async with Server(lambda _: chunked(EVENTS)) as server:
        for _ in range(rounds):
            for name, take in (("ready", chat.first_event), ("deadline", _deadline_only)):
                spent = 0.0
                for _ in range(n):
                    stream = hs.SseStream(
                        await hs.open_reply(client, request(server.url), WHERE, 1 << 20), WHERE
                    )
                    events = stream.events()
                    await asyncio.sleep(0.001)  # the whole reply is read by now
                    started = time.thread_time()
                    first = await take(stream, events, call)
                    spent += time.thread_time() - started
                    assert first == EVENTS[0]
                    await stream.aclose()
                results[name].append(spent / n * 1e6)
    await client.aclose()
    print(
        json.dumps(
            {
                name: {
                    "us_per_call": [round(v, 2) for v in spent],
                    "median": round(statistics.median(spent), 2),
                }
                for name, spent in results.items()
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--asyncio", action="store_true", help="asyncio's loop, not uvloop")
    args = parser.parse_args()
    if args.asyncio:
        asyncio.run(main(args.n, args.rounds))
    else:
        import uvloop  # the gateway's loop

        uvloop.run(main(args.n, args.rounds))
