"""A stream's loop-thread CPU in two windows, in-process: to its first event, and after it.

Run: `python bench/streams_window.py [--src DIR] [--pairs 3] [-n 2000] [--warm 500]
[--config hot|plain] [--cprofile first|rest --out FILE]`.

The real app (`create_app` and its lifespan, as bench/pipeline_inproc.py builds it) serves
perf-floor's loadgen request (`stream: true`, `stream_options.include_usage`: the client
gets the usage chunk, `usage.cost` in it) through its ASGI interface, one at a time,
against perf-floor's mock upstream on core 0; this process on core 1. Per request,
`time.thread_time()` is read at the app's call, at its first `http.response.body`
message (`first`: the head and the first event) and at its return (`rest`: the other
events, `[DONE]`, the booking, the end). Each tree runs in its own process; with `--src`
they alternate, `--pairs` times. Means of the per-request windows (us), and medians.

`--cprofile first|rest` profiles that window alone (the profiler enabled and disabled at
its edges) and writes pstats to `--out`: which calls a window makes, counted exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _body(i: int) -> bytes:
    """perf-floor's loadgen streamed request."""
    body: dict[str, Any] = {
        "model": "bench-gpt",
        "messages": [{"role": "user", "content": f"Say hello (request {i})."}],
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(body).encode()


async def _one(app: Any, state: dict[str, Any], body: bytes, marks: list[float], prof: Any) -> None:
    from pipeline_inproc import _receive, _scope  # bench/ is the script folder: sys.path[0]

    status: list[int] = []
    clock = time.thread_time

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body" and len(marks) == 1:
            if prof is not None:
                prof.toggle("first")
            marks.append(clock())
            if prof is not None:
                prof.toggle("rest")

    marks.append(clock())
    if prof is not None:
        prof.toggle("first")
    await app(_scope(state, body), _receive(body), send)
    if prof is not None:
        prof.toggle(None)
    marks.append(clock())
    if status != [200]:
        raise RuntimeError(f"the gateway answered {status}, not 200")


class Prof:
    """cProfile switched on only in one window."""

    def __init__(self, window: str) -> None:
        import cProfile

        self.window, self.on = window, False
        self.profile = cProfile.Profile()

    def toggle(self, entering: str | None) -> None:
        want = entering == self.window
        if want and not self.on:
            self.profile.enable()
        elif not want and self.on:
            self.profile.disable()
        self.on = want


async def _child(args: argparse.Namespace, port: int) -> dict[str, Any]:
    from hotpath_targets import FAREBOX_CONFIG
    from pipeline_inproc import PLAIN

    from gateway.app import create_app
    from gateway.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="farebox-sw-"))
    config = data / "config.yaml"
    base = f"http://127.0.0.1:{port}/v1"
    hot = FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
    config.write_text(hot if args.config == "hot" else PLAIN.format(port=port))
    app = create_app(Settings(data_dir=data, config=config, log_level="warning"))
    first: list[float] = []
    rest: list[float] = []
    async with app.router.lifespan_context(app) as given:
        state = dict(given or {})
        for i in range(args.warm):
            await _one(app, state, _body(i), [], None)
        prof = Prof(args.cprofile) if args.cprofile else None
        for i in range(args.n):
            marks: list[float] = []
            await _one(app, state, _body(i), marks, prof)
            first.append((marks[1] - marks[0]) * 1e6)
            rest.append((marks[2] - marks[1]) * 1e6)
        if prof is not None:
            prof.profile.dump_stats(args.out)
    return {
        "first_mean": round(statistics.fmean(first), 1),
        "first_p50": round(statistics.median(first), 1),
        "rest_mean": round(statistics.fmean(rest), 1),
        "rest_p50": round(statistics.median(rest), 1),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--src", help="another checkout to alternate with (A/B)")
    parser.add_argument("--config", choices=("plain", "hot"), default="hot")
    parser.add_argument("--cprofile", choices=("first", "rest"))
    parser.add_argument("--out", default="/tmp/streams-window.pstats")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from checkout import use_checkout

        use_checkout(args.tree)
        os.sched_setaffinity(0, {1})
        print(json.dumps(asyncio.run(_child(args, args.port))))
        return
    port = _free_port()
    mock_command = [sys.executable, str(args.floor / "mock_upstream.py"), "--port", str(port)]
    mock = subprocess.Popen(["taskset", "-c", "0", *mock_command], stdout=subprocess.DEVNULL)
    trees = [str(ROOT)] + ([args.src] if args.src else [])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
        for _ in range(args.pairs):
            for tree in trees:
                command = [sys.executable, __file__, "--child", "--tree", tree]
                command += ["--port", str(port), "-n", str(args.n), "--warm", str(args.warm)]
                command += ["--config", args.config, "--out", args.out]
                command += ["--cprofile", args.cprofile] if args.cprofile else []
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    raise RuntimeError(out.stderr[-3000:])
                row = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps({"src": tree, **row, "load": os.getloadavg()[0]}), flush=True)
    finally:
        mock.terminate()
        mock.wait()


if __name__ == "__main__":
    main()
