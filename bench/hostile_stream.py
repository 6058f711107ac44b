"""How the gateway copes with an upstream stream that never ends an event.

Run: `python bench/hostile_stream.py`. Prints (1) how long the SSE splitter takes on
64 MB with no event separator, cap lifted, at several chunk sizes (linear: the time per
MB does not grow with the size), and (2) end to end, a gateway on a real port in front of
the hostile upstream (`tests/hostile_upstream.py`) sending a 20 MB event with no end:
the time until the client gets its 502 `upstream_bad_reply`, and the worst `/healthz`
latency meanwhile. Before the linear splitter, 64 MB took 102 s and /healthz 2.8 s.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.settings import Settings
from gateway.upstream.sse import iter_events
from tests.hostile_upstream import ask, hostile_upstream
from tests.servers import running

MB = 1024 * 1024


async def _split(size: int, chunk: int) -> float:
    data = b"data: " + b"x" * size

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(data), chunk):
            yield data[start : start + chunk]

    started = time.perf_counter()
    async for _ in iter_events(chunks(), max_event_bytes=1 << 40):
        pass
    return time.perf_counter() - started


def splitter() -> None:
    for size in (16 * MB, 64 * MB):
        for chunk in (512, 65536):
            seconds = asyncio.run(_split(size, chunk))
            print(f"split {size // MB:>3} MB, {chunk:>5} B chunks: {seconds:6.3f} s")


def end_to_end(rounds: int = 3) -> None:
    with hostile_upstream() as upstream, tempfile.TemporaryDirectory() as data:
        route = {"provider": "openai", "model": "hostile", "base_url": upstream.base_url}
        config = GatewayConfig.model_validate({"models": {"hostile": route}})
        with running(create_app(Settings(data_dir=Path(data)), config)) as gateway:
            idle, stop = [0.0], threading.Event()
            poller = threading.Thread(target=_poll, args=(gateway.url, idle, stop))
            poller.start()
            time.sleep(1)  # the baseline: client, gateway and upstream share this process
            stop.set()
            poller.join()
            print(f"worst /healthz latency, idle: {idle[0] * 1000:.1f} ms")
            worst, stop = [0.0], threading.Event()
            poller = threading.Thread(target=_poll, args=(gateway.url, worst, stop))
            poller.start()
            body = {"model": "hostile", "messages": ask("endless"), "stream": True}
            for _ in range(rounds):
                started = time.perf_counter()
                reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
                code = reply.json()["error"]["code"]
                elapsed = time.perf_counter() - started
                print(f"20 MB endless event: {reply.status_code} {code} in {elapsed:.3f} s")
            stop.set()
            poller.join()
            print(f"worst /healthz latency meanwhile: {worst[0] * 1000:.1f} ms")


def _poll(url: str, worst: list[float], stop: threading.Event) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get(f"{url}/healthz")
            worst[0] = max(worst[0], time.perf_counter() - started)
            time.sleep(0.02)


if __name__ == "__main__":
    splitter()
    end_to_end()
