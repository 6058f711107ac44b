"""CPU per request of the upstream client alone over TLS: h1 against aiohttp, in pairs.

Run: `python bench/tls_client_cpu.py [--pairs 3] [-n 4000] [-c 64] [--stream]`.

Starts bench/tls_mock.py (perf-floor's mock behind TLS) on core 0 and pins this process to
core 1, then alternates the two clients of `gateway.upstream.http_stream.HttpClient` on
uvloop: `aiohttp` (its session, as `HttpClient.send` used it for https:// until h1 took
them) and `h1` (its pool). Each run is a fresh client: a warm-up of 2 x c requests (the
TLS handshakes), then `n` requests, `c` at a time, read as the gateway reads them (whole:
`read_at_most`; stream: `SseEvents.batch` to the end). CPU is this process's
`time.process_time()` over the measured requests. Prints one JSON object, a ratio per pair.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WHERE = "bench (127.0.0.1)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_mock(ca_out: Path) -> tuple[subprocess.Popen[bytes], int]:
    """bench/tls_mock.py on core 0; returns once its CA file (its readiness) is written."""
    port = _free_port()
    cmd = ["taskset", "-c", "0", sys.executable, str(ROOT / "bench" / "tls_mock.py")]
    mock = subprocess.Popen([*cmd, "--port", str(port), "--ca-out", str(ca_out)])
    for _ in range(600):
        if ca_out.exists():
            return mock, port
        if mock.poll() is not None:
            break
        time.sleep(0.05)
    mock.kill()
    raise RuntimeError("bench/tls_mock.py did not start")


async def _one(hs: Any, client: Any, kind: str, request: Any, stream: bool) -> None:
    if kind == "h1":
        response = await client.pool().request(
            request.url, request.body, request.headers, request.timeout
        )
    else:
        response = await client.session().post(
            request.url,
            data=request.body,
            headers=request.headers,
            timeout=request.timeout,
            allow_redirects=False,
        )
    try:
        if stream:
            events = hs.SseEvents(response.content, WHERE)
            while await events.batch():
                pass
        else:
            await hs.read_at_most(response, 1 << 20)
    finally:
        response.release()


async def _run(kind: str, url: str, n: int, c: int, stream: bool) -> float:
    """Milliseconds of CPU per request over `n` requests, `c` at a time."""
    from gateway.upstream import http_stream as hs

    body = json.dumps(
        {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        | ({"stream_options": {"include_usage": True}} if stream else {})
    ).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer bench-key"}
    request = hs.HttpRequest(url, body, headers, hs.client_timeout(10, 30))
    client = hs.HttpClient()

    async def worker(count: int) -> None:
        for _ in range(count):
            await _one(hs, client, kind, request, stream)

    try:
        await asyncio.gather(*(worker(2) for _ in range(c)))  # handshakes, first-use costs
        before = time.process_time()
        await asyncio.gather(*(worker(n // c) for _ in range(c)))
        spent = time.process_time() - before
    finally:
        await client.aclose()
    return spent * 1000 / (n // c * c)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("-n", type=int, default=4000)
    parser.add_argument("-c", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    ca = Path(tempfile.mkdtemp(prefix="tls-bench-")) / "ca.pem"
    mock, port = start_mock(ca)
    os.environ["SSL_CERT_FILE"] = str(ca)  # before aiohttp makes its context (at import)
    os.sched_setaffinity(0, {1})
    sys.path.insert(0, str(ROOT))
    import uvloop

    url = f"https://127.0.0.1:{port}/v1/chat/completions"
    rows: list[dict[str, Any]] = []
    try:
        for pair in range(args.pairs):
            order = ("aiohttp", "h1") if pair % 2 == 0 else ("h1", "aiohttp")
            row = {
                kind: round(uvloop.run(_run(kind, url, args.n, args.c, args.stream)), 4)
                for kind in order
            }
            row["h1/aiohttp"] = round(row["h1"] / row["aiohttp"], 3)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        mock.terminate()
        mock.wait(10)
    summary = {"stream": args.stream, "c": args.c, "n": args.n, "cpu_ms_per_req": rows}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
