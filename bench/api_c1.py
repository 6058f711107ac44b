"""Concurrency 1, small request, on each model API: what the gateway adds, served.

Run: `python bench/api_c1.py [--src DIR] [--api chat,messages,responses] [-n 1000]
[--pairs 3] [--stream]`.

perf-floor's loadgen speaks chat completions only, so this drives /v1/messages and
/v1/responses (and chat, for comparison) itself: one keep-alive connection from a client
on core 0 (`http.client`), beside perf-floor's mock upstream, to `farebox serve` pinned to
core 1 with bench/hotpath.py's configuration (one OpenAI-wire model on the mock: Messages
and Responses requests are translated to chat and back). Each request is timed from its
send to its last byte, or with `--stream` to its first body bytes (the first event: the
mock writes a whole small stream at once, so this is the time to first token, TTFT), the
rest read before the next request. For each tree (this checkout, then `--src`; all again for each
pair, so trees alternate within the same minutes) and each API it prints p50 and p99 and
the *added* p50 / p99: minus the same client's percentiles straight to the mock (a chat
request) in the same round. The client's own time is in both, so *added* is the
gateway's, as bench/hotpath.py's is; the absolute numbers are the client's too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from c1_path import LAUNCH, PY  # bench/ is the script folder
from hotpath_targets import FAREBOX_CONFIG
from pipeline_cpu import _free_port, _wait_port
from stream_instructions import PATHS, _body

ROOT = Path(__file__).resolve().parents[1]
MODEL, UPSTREAM = "bench-gpt", "mock-model"
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def _times(port: int, path: str, n: int, api: str, stream: bool = False) -> list[float]:
    """Seconds per request, send to last byte (`stream`: to first body bytes), over one
    keep-alive connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = HEADERS | (ANTHROPIC if api == "messages" else {})
    took = []
    try:
        for i in range(n):
            body = _body(i, stream, api) if api != "direct" else _body(i, stream)
            if api == "direct":
                body = body.replace(MODEL.encode(), UPSTREAM.encode())
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


def _percentiles(took: list[float]) -> tuple[float, float]:
    ms = sorted(t * 1000 for t in took)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def _round(args: argparse.Namespace, src: str, mock_port: int, config: Path) -> dict[str, Any]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    data = tempfile.mkdtemp(prefix="farebox-api-c1-")
    env |= {"FAREBOX_PORT": str(port), "FAREBOX_CONFIG": str(config), "FAREBOX_DATA_DIR": data}
    env["FAREBOX_LOG_LEVEL"] = "warning"
    cmd = ["taskset", "-c", "1", PY, "-c", LAUNCH, src, "serve"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    row: dict[str, Any] = {"src": src, "stream": args.stream}
    try:
        _wait_port(port, proc)
        for api in args.api:  # warm each path: its first request imports its front's code
            _times(port, PATHS[api], 200, api, args.stream)
        chat = "/v1/chat/completions"
        direct = _percentiles(_times(mock_port, chat, args.n, "direct", args.stream))
        row["direct"] = {"p50": round(direct[0], 3), "p99": round(direct[1], 3)}
        for api in args.api:
            p50, p99 = _percentiles(_times(port, PATHS[api], args.n, api, args.stream))
            row[api] = {
                "p50": round(p50, 3),
                "p99": round(p99, 3),
                "added_p50": round(p50 - direct[0], 3),
                "added_p99": round(p99 - direct[1], 3),
            }
    finally:
        proc.terminate()
        proc.wait(10)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--src", help="another checkout to alternate with (A/B)")
    parser.add_argument("--api", default="chat,messages,responses", type=lambda s: s.split(","))
    parser.add_argument("--stream", action="store_true", help="time to first event (TTFT)")
    args = parser.parse_args()
    unknown = set(args.api) - set(PATHS) | ({"completions"} & set(args.api))
    if unknown:
        parser.error(f"--api: {sorted(unknown)} (the mock serves chat completions only)")
    mock_port = _free_port()
    mock_cmd = [sys.executable, str(args.floor / "mock_upstream.py"), "--port", str(mock_port)]
    mock = subprocess.Popen(["taskset", "-c", "0", *mock_cmd], stdout=subprocess.DEVNULL)
    os.sched_setaffinity(0, {0})  # the client beside the mock, off the gateway's core
    config = Path(tempfile.mkdtemp(prefix="farebox-api-c1-")) / "config.yaml"
    base = f"http://127.0.0.1:{mock_port}/v1"
    config.write_text(FAREBOX_CONFIG.format(model=MODEL, upstream=UPSTREAM, base=base))
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
