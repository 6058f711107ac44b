"""Instructions a chat request costs in-process: to its first body message, and after it.

Run: `python bench/stream_instructions.py [--src DIR] [--pairs 3] [-n 200] [--warm 150]
[--whole] [--config hot] [--api chat|messages|messages-native|responses|completions]
[--keep]`.

`--api` sends the same small request in another API's wire (`PATHS`, `_body`): with
`--config hot` /v1/messages and /v1/responses reach the mock translated to chat
completions; /v1/completions needs an upstream /v1/completions, which the mock lacks.
`--api messages-native` sends the Messages request to a `provider: anthropic` route on
bench/hotpath_mock.py's Messages API (forwarded natively, Claude Code's usual path).

For the TTFT at concurrency 1, what counts is the work on the loop before a stream's
first event is sent; whole-process counts (`bench/pipeline_cpu.py --callgrind`) mix it
with the stream's end, the booking and the ledger's thread. Here the real app
(`create_app` and its lifespan, as bench/pipeline_inproc.py builds it: SQLite ledger,
in-process state) serves the load generator's request (`stream_options.include_usage`)
through its ASGI interface, one at a time, against perf-floor's mock upstream, under
`valgrind --tool=callgrind --collect-atstart=no --separate-threads=yes`. Collection is
switched on and off by callgrind's client requests (a tiny C library built here), so
each count is exact for its window:

- `first`: from the app's call to its first `http.response.body` message (the head
  is sent before it; a whole reply's body is its first and last);
- `rest`: from that message to the app's return (a stream's other events, its
  booking, its end).

Counted over `-n` requests each (after `--warm` uncounted ones), per request, on the
loop's thread alone (a client request dumps its own thread's counts: the ledger writer's
thread is left out).
Each tree runs in its own valgrind process; with `--src` the trees alternate, `--pairs`
times. Runs are ~50 times slower than native: keep `-n` small. One JSON line per run.

`--quiet-timers` keeps the work that runs on the loop by the wall clock out of the
windows: under valgrind a request takes ~50 times as long, so LoopWatch's 200 Hz timer,
the ledger's flush every 0.2 s and the key cache's poll every 2 s land inside them as
often as the box's load stretches them (two runs of one tree read 1,054,634 and 1,058,894
for `first`). With it LoopWatch is stopped once the app has started, the ledger flushes
every 1,000 s and the keys are polled every hour: what is counted is the request's own
work, and two trees compare to a few hundred instructions (bench/front_instructions.py
runs this with it).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKERS_C = r"""
#include <valgrind/callgrind.h>
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
"""
WINDOWS = ("first", "rest")


def _markers(folder: Path) -> Path:
    """The client-request library: `cg_toggle` and `cg_dump`, built with the system's cc."""
    source, library = folder / "markers.c", folder / "markers.so"
    source.write_text(MARKERS_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
    return library


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
    "completions": "/v1/completions",
    "messages-native": "/v1/messages",
}
"""Each `--api`'s path. The mock serves chat completions only: the hot config's route is
OpenAI-wire, so /v1/messages and /v1/responses reach it translated to chat; /v1/completions
goes to the upstream's own /v1/completions, which the mock answers with a 404."""


def _body(i: int, stream: bool, api: str = "chat") -> bytes:
    """perf-floor's loadgen request, or the same small request in `api`'s wire."""
    prompt = f"Say hello (request {i})."
    body: dict[str, Any] = {"model": "bench-claude" if api == "messages-native" else "bench-gpt"}
    if api in ("messages", "messages-native"):  # as the Anthropic SDK sends it (no Claude
        # Code session header)
        body |= {"max_tokens": 64, "messages": [{"role": "user", "content": prompt}]}
    elif api == "responses":  # as the OpenAI SDK sends it: `store` left to its default
        body |= {"input": prompt, "max_output_tokens": 64}
    elif api == "completions":
        body |= {"prompt": prompt, "max_tokens": 64}
    else:
        body |= {"messages": [{"role": "user", "content": prompt}], "max_tokens": 64}
    if stream:
        body["stream"] = True
        if api in ("chat", "completions"):
            body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def _scope_for(state: dict[str, Any], body: bytes, api: str) -> dict[str, Any]:
    """pipeline_inproc's chat request scope, at `api`'s path."""
    from pipeline_inproc import _scope  # bench/ is the script folder: sys.path[0]

    scope = _scope(state, body)
    path = PATHS[api]
    scope["path"], scope["raw_path"] = path, path.encode()
    if api in ("messages", "messages-native"):
        scope["headers"] = [*scope["headers"], (b"anthropic-version", b"2023-06-01")]
    return scope


class Window:
    """Which window a request is in, and callgrind's collection switched to match."""

    def __init__(self, library: Path) -> None:
        self._lib = ctypes.CDLL(str(library))
        self.counting: str | None = None  # the window being counted, None: none
        self.collecting = False

    def set(self, window: str | None) -> None:
        """Enter `window` (or none); collection is on while it is the one counted."""
        on = window is not None and window == self.counting
        if on != self.collecting:
            self._lib.cg_toggle()
            self.collecting = on

    def dump(self, what: str) -> None:
        self._lib.cg_dump(what.encode())


async def _one(
    app: Any, state: dict[str, Any], body: bytes, window: Window, api: str = "chat"
) -> None:
    from pipeline_inproc import _receive  # bench/ is the script folder: sys.path[0]

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            window.set("rest")

    window.set("first")
    await app(_scope_for(state, body, api), _receive(body), send)
    window.set(None)
    if status != [200]:
        raise RuntimeError(f"the gateway answered {status}, not 200")


async def _child(args: argparse.Namespace, port: int) -> None:
    from hotpath_targets import ANTHROPIC_KEY_ENV, FAREBOX_CONFIG, with_native_route
    from pipeline_inproc import PLAIN

    from gateway.app import create_app
    from gateway.settings import Settings

    data = Path(tempfile.mkdtemp(prefix="farebox-cg-"))
    config = data / "config.yaml"
    base = f"http://127.0.0.1:{port}/v1"
    hot = FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
    if args.api == "messages-native":  # its route added to the hot config
        hot = with_native_route(hot, base.removesuffix("/v1"))
        os.environ[ANTHROPIC_KEY_ENV] = "sk-ant-bench"
    config.write_text(hot if args.config == "hot" else PLAIN.format(port=port))
    quiet: dict[str, Any] = (
        {"ledger_flush_interval": 1000.0, "keys_refresh_s": 3600.0} if args.quiet_timers else {}
    )
    app = create_app(Settings(data_dir=data, config=config, log_level="warning", **quiet))
    window = Window(Path(args.markers))
    stream = not args.whole
    async with app.router.lifespan_context(app) as given:
        state = dict(given or {})
        watch = getattr(app.state, "loop_watch", None)
        if args.quiet_timers and watch is not None:
            await watch.__aexit__(None, None, None)  # its 200 Hz timer stops
        while state["services"].upstreams.warming:  # litellm loading beside the loop
            await asyncio.sleep(0.05)
        for i in range(args.warm):
            await _one(app, state, _body(i, stream, args.api), window, args.api)
        for name in WINDOWS:
            window.counting = name
            for i in range(args.n):
                await _one(app, state, _body(i, stream, args.api), window, args.api)
            window.counting = None
            window.dump(name)


def _counts(folder: Path, pid: int) -> dict[str, dict[str, int]]:
    """Each window's instructions, per thread, from the dumps its client request made."""
    counts: dict[str, dict[str, int]] = {}
    for dump in folder.glob(f"cg.{pid}*"):
        text = dump.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: (\w+)", text, re.MULTILINE)
        summary = re.search(r"^summary: (\d+)", text, re.MULTILINE)
        thread = re.search(r"^thread: (\d+)", text, re.MULTILINE)
        if trigger is None or summary is None or trigger.group(1) not in WINDOWS:
            continue
        by_thread = counts.setdefault(trigger.group(1), {})
        by_thread[thread.group(1) if thread else "1"] = int(summary.group(1))
    return counts


def _run(args: argparse.Namespace, tree: Path, port: int, library: Path) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="stream-cg-"))
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--separate-threads=yes"]
    command += [f"--callgrind-out-file={folder}/cg.%p", sys.executable, __file__, "--child"]
    command += ["--tree", str(tree), "--port", str(port), "--markers", str(library)]
    command += ["-n", str(args.n), "--warm", str(args.warm), "--config", args.config]
    command += ["--api", args.api]
    command += ["--whole"] if args.whole else []
    command += ["--quiet-timers"] if args.quiet_timers else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    started = time.monotonic()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the run under valgrind failed: {proc.stderr[-2000:]}")
    pid = int(re.search(r"==(\d+)==", proc.stderr).group(1))  # type: ignore[union-attr]
    counts = _counts(folder, pid)
    row: dict[str, Any] = {"src": str(tree), "api": args.api, "stream": not args.whole}
    row["n"] = args.n
    for name in WINDOWS:
        threads = counts.get(name, {})
        row[name] = round(threads.get("1", 0) / args.n)
    row["seconds"] = round(time.monotonic() - started)
    if args.keep:  # for callgrind_annotate: where each window's instructions went
        row["dumps"] = str(folder)
        return row
    for dump in folder.iterdir():
        dump.unlink()
    folder.rmdir()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--warm", type=int, default=150)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--src", help="another checkout to alternate with (A/B)")
    parser.add_argument("--whole", action="store_true", help="whole replies, not streams")
    parser.add_argument("--config", choices=("plain", "hot"), default="plain")
    parser.add_argument("--api", choices=tuple(PATHS), default="chat", help="the request's API")
    parser.add_argument("--keep", action="store_true", help="keep the dumps; print their folder")
    parser.add_argument(
        "--quiet-timers", action="store_true", help="no wall-clock timers inside the windows"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--markers", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from checkout import use_checkout

        use_checkout(args.tree)
        import uvloop

        uvloop.run(_child(args, args.port))
        return
    port = _free_port()
    from hotpath_targets import popen_mock

    mock = popen_mock(port, args.floor)
    try:
        library = _markers(Path(tempfile.mkdtemp(prefix="cg-markers-")))
        trees = [ROOT] + ([Path(args.src)] if args.src else [])
        for _ in range(args.pairs):
            for tree in trees:
                print(json.dumps(_run(args, tree, port, library)), flush=True)
    finally:
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    main()
