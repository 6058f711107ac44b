"""CPU per streamed chunk of the chat relay's reading and metering: full walk and short path.

Run: `python bench/relay_chunks.py [--tokens 16] [--rounds 5] [--n 20000]`.

Builds the events the perf-floor mock upstream sends for one stream (role chunk, one chunk
per token, the finish chunk, the usage chunk; `--tier` adds OpenAI's `service_tier` to each)
and times, in this process (CPU time, best of `--rounds`), what `Relay._outgoing` does per
event without a thinking cap, two ways:

- full: every chunk parsed, shape-checked, checked for an error and walked by
  `Meter.observe_chunk` (the relay before the short path);
- short: `line_data`, `read_chunk`, and `Meter.observe_content` for plain content chunks
  (tests/unit/test_relay_plain_chunks.py checks that both leave the same meter).

Prints one JSON object: µs per stream and per event for each, and the saving per stream.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import orjson

from gateway.pipeline.measure import Meter
from gateway.upstream.replies import chunk_object, error_in_chunk, line_data, read_chunk
from gateway.upstream.sse import DONE, event_data


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


def _best_us(run: Any, events: list[bytes], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(n):
            run(events)
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--tier", default=None, help="a service_tier in every chunk")
    args = parser.parse_args()
    events = _events(args.tokens, args.tier)
    out: dict[str, Any] = {"tokens": args.tokens, "events": len(events), "tier": args.tier}
    for name, run in (("full", _full), ("short", _short)):
        per_stream = _best_us(run, events, args.n, args.rounds)
        out[name] = {"us_per_stream": round(per_stream, 2)}
        out[name]["us_per_event"] = round(per_stream / len(events), 3)
    out["saved_us_per_stream"] = round(
        out["full"]["us_per_stream"] - out["short"]["us_per_stream"], 2
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
