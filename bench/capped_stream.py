"""CPU per chunk of the stream thinking cap on a translated stream, side by side.

A translated Messages or Responses stream with a stream-enforced thinking budget has its
chat stream wrapped in `thinking_cap.CappedStream` (it parses each chunk to count the
reasoning). This times, in one process and run, the same 2,000-chunk chat stream (40
reasoning deltas, then answer deltas, a usage chunk, `[DONE]`) read:

- `plain`: straight from the upstream stream (the path without a cap);
- `capped`: through `CappedStream` with a budget the stream never reaches (the per-chunk
  price every capped stream pays; a cut adds one continuation call, an upstream's time);
- `translated`: plain, each chunk parsed and told as Anthropic events
  (`StreamTranslator`): what a translated Messages stream already spends, for scale.

  .venv/bin/python bench/capped_stream.py [--chunks 2000] [--rounds 7]

Prints a Markdown table: best and median microseconds of CPU per chunk, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.pipeline.messages_stream_translate import StreamTranslator
from gateway.pipeline.thinking_cap import CappedStream, ThinkingCap
from gateway.upstream.base import UpstreamStream


class _Replay:
    """An upstream stream that replays prepared events."""

    def __init__(self, events: list[bytes]) -> None:
        self.headers: dict[str, str] = {}
        self._events = events

    async def events(self) -> AsyncIterator[bytes]:
        for event in self._events:
            yield event

    async def aclose(self) -> None:
        return None


def _stream(chunks: int) -> list[bytes]:
    envelope = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = []
    for index in range(chunks):
        delta = {"reasoning": "think "} if index < 40 else {"content": "word "}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        out.append(b"data: " + orjson.dumps(envelope | {"choices": [choice]}) + b"\n\n")
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": chunks + 10}
    out.append(b"data: " + orjson.dumps(envelope | {"choices": [], "usage": usage}) + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


async def _never(body: dict[str, Any]) -> UpstreamStream:
    raise AssertionError("the budget is never reached")


async def _read(stream: UpstreamStream, translate: bool = False) -> float:
    translator = StreamTranslator("m", 10)
    started = time.process_time()
    async for event in stream.events():
        if translate and not event.startswith(b"data: [DONE]"):
            translator.feed(orjson.loads(event[6:]))
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    events = _stream(args.chunks)
    runs: dict[str, list[float]] = {"plain": [], "capped": [], "translated": []}
    for _ in range(args.rounds):
        runs["plain"].append(asyncio.run(_read(_Replay(events))))
        cap = ThinkingCap(10**9, {"messages": []}, _never)
        runs["capped"].append(asyncio.run(_read(CappedStream(_Replay(events), cap))))
        runs["translated"].append(asyncio.run(_read(_Replay(events), translate=True)))
    per_chunk = {k: [v / len(events) * 1e6 for v in values] for k, values in runs.items()}
    print("| variant | best µs/chunk | median µs/chunk |")
    print("|---|---|---|")
    for name, values in per_chunk.items():
        print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} |")
    plain, capped = (statistics.median(per_chunk[k]) for k in ("plain", "capped"))
    print(f"\ncapped adds {capped - plain:.2f} µs per chunk (median); {capped / plain:.1f}x plain")


if __name__ == "__main__":
    main()
