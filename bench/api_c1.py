"""Concurrency 1, small request, on each model API: what the gateway adds, served.

Run: `python bench/api_c1.py [--src DIR] [--api chat,messages,messages-native,responses]
[-n 1000]
[--pairs 3] [--stream]`.

perf-floor's loadgen speaks chat completions only, so this drives /v1/messages and
/v1/responses (and chat, for comparison) itself: one keep-alive connection from a client
on core 0 (`http.client`), beside perf-floor's mock upstream (bench/hotpath_mock.py), to
`farebox serve` pinned to core 1 with bench/hotpath.py's configuration (one OpenAI-wire
model on the mock: `messages` and `responses` requests are translated to chat and back)
and one `provider: anthropic` model on the mock's Anthropic wire: `messages-native` is
the same /v1/messages request forwarded natively, as Claude Code's usually is. Each
request is timed from its send to its last byte, or with `--stream` to its first body
bytes (the first event: the mock writes a whole small stream at once, so this is the time
to first token, TTFT), the rest read before the next request. For each tree (this
checkout, then `--src`; all again for each pair, so trees alternate within the same
minutes) and each API it prints p50 and p99 and the *added* p50 / p99: minus the same
client's percentiles straight to the mock (a chat request; for `messages-native`, the
same Messages request) in the same round. The client's own time is in both, so *added* is
the gateway's, as bench/hotpath.py's is; the absolute numbers are the client's too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from c1_path import LAUNCH, PY  # bench/ is the script folder
from hotpath_targets import (
    ANTHROPIC_KEY_ENV,
    CLAUDE_MODEL,
    CLAUDE_UPSTREAM,
    FAREBOX_CONFIG,
    popen_mock,
    with_native_route,
)
from pipeline_cpu import _free_port, _wait_port
from stream_instructions import PATHS, _body

ROOT = Path(__file__).resolve().parents[1]
MODEL, UPSTREAM = "bench-gpt", "mock-model"
NATIVE = "messages-native"
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def _times(port: int, path: str, n: int, api: str, stream: bool = False) -> list[float]:
    """Seconds per request, send to last byte (`stream`: to first body bytes), over one
    keep-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = HEADERS | (ANTHROPIC if "messages" in api else {})
    took = []
    try:
        for i in range(n):
            body = _request(i, stream, api)
            started = time.perf_counter()
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            if stream:
                response.read1()  # the first event's bytes
                took.append(time.perf_counter() - started)
                response.read()
            else:
                response.read()
                took.append(time.perf_counter() - started)
            if response.status != 200:
                raise RuntimeError(f"{path} answered {response.status}")
    finally:
        connection.close()
    return took


def _request(i: int, stream: bool, api: str) -> bytes:
    """Request `i` in `api`'s wire; `direct` and `direct-messages` name the mock's model."""
    if api in ("direct", "direct-messages"):
        body = _body(i, stream, "chat" if api == "direct" else "messages")
        return body.replace(
            MODEL.encode(), (UPSTREAM if api == "direct" else CLAUDE_UPSTREAM).encode()
        )
    if api == NATIVE:
        return _body(i, stream, "messages").replace(MODEL.encode(), CLAUDE_MODEL.encode())
    return _body(i, stream, api)


def _percentiles(took: list[float]) -> tuple[float, float]:
    ms = sorted(t * 1000 for t in took)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def _round(args: argparse.Namespace, src: str, mock_port: int, config: Path) -> dict[str, Any]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    data = tempfile.mkdtemp(prefix="farebox-api-c1-")
    env |= {"FAREBOX_PORT": str(port), "FAREBOX_CONFIG": str(config), "FAREBOX_DATA_DIR": data}
    env[ANTHROPIC_KEY_ENV] = "sk-ant-bench"
    env["FAREBOX_LOG_LEVEL"] = "warning"
    cmd = ["taskset", "-c", "1", PY, "-c", LAUNCH, src, "serve"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    row: dict[str, Any] = {"src": src, "stream": args.stream}
    try:
        _wait_port(port, proc)
        _wait_ready(port)
        for api in args.api:  # warm each path: its first request imports its front's code
            _times(port, _path(api), 200, api, args.stream)
        directs = {}
        for direct_api in ("direct", "direct-messages") if NATIVE in args.api else ("direct",):
            took = _times(mock_port, _path(direct_api), args.n, direct_api, args.stream)
            directs[direct_api] = _percentiles(took)
            row[direct_api] = {"p50": round(directs[direct_api][0], 3)}
            row[direct_api]["p99"] = round(directs[direct_api][1], 3)
        for api in args.api:
            direct = directs["direct-messages" if api == NATIVE else "direct"]
            answered = _mock_messages(mock_port)
            p50, p99 = _percentiles(_times(port, _path(api), args.n, api, args.stream))
            answered = _mock_messages(mock_port) - answered
            row[api] = {
                "p50": round(p50, 3),
                "p99": round(p99, 3),
                "added_p50": round(p50 - direct[0], 3),
                "added_p99": round(p99 - direct[1], 3),
                "upstream_messages": answered,  # the mock's /v1/messages: native, not translated
            }
    finally:
        proc.terminate()
        proc.wait(10)
    return row


def _mock_messages(mock_port: int) -> int:
    """How many /v1/messages requests the mock has answered."""
    connection = http.client.HTTPConnection("127.0.0.1", mock_port, timeout=10)
    try:
        connection.request("GET", "/bench/connections")
        return int(json.loads(connection.getresponse().read())["messages"])
    finally:
        connection.close()


def _wait_ready(port: int, limit_s: float = 120.0) -> None:
    """Until /readyz answers 200: an `anthropic` route loads litellm in the background (for
    chat requests to it), which would otherwise share the core with the first API measured."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return
        finally:
            connection.close()
        time.sleep(0.1)
    raise RuntimeError(f"the gateway on port {port} was not ready after {limit_s} s")


def _path(api: str) -> str:
    if api == "direct":
        return PATHS["chat"]
    return PATHS["messages"] if api in (NATIVE, "direct-messages") else PATHS[api]


def _config(mock_port: int, native: bool) -> Path:
    """bench/hotpath.py's configuration, plus (`native`) the Anthropic-wire route on the
    same mock: litellm is then loaded too (for chat requests to that route)."""
    config = Path(tempfile.mkdtemp(prefix="farebox-api-c1-")) / "config.yaml"
    base = f"http://127.0.0.1:{mock_port}"
    text = FAREBOX_CONFIG.format(model=MODEL, upstream=UPSTREAM, base=f"{base}/v1")
    config.write_text(with_native_route(text, base) if native else text)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--src", help="another checkout to alternate with (A/B)")
    parser.add_argument(
        "--api", default=f"chat,messages,{NATIVE},responses", type=lambda s: s.split(",")
    )
    parser.add_argument("--stream", action="store_true", help="time to first event (TTFT)")
    args = parser.parse_args()
    unknown = set(args.api) - set(PATHS) - {NATIVE} | ({"completions"} & set(args.api))
    if unknown:
        parser.error(f"--api: {sorted(unknown)} (the mock serves chat completions and messages)")
    mock_port = _free_port()
    mock = popen_mock(mock_port, args.floor)
    os.sched_setaffinity(0, {0})  # the client beside the mock, off the gateway's core
    config = _config(mock_port, NATIVE in args.api)
    try:
        _wait_port(mock_port, mock)
        trees = [str(ROOT)] + ([str(Path(args.src).resolve())] if args.src else [])
        for _ in range(args.pairs):
            for tree in trees:
                print(json.dumps(_round(args, tree, mock_port, config)), flush=True)
    finally:
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    main()
