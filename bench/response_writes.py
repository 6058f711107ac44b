"""Count the writes a response takes: run under strace, 50 keep-alive requests to a small app.

    strace -f -c -e trace=write,writev,sendto python bench/response_writes.py [--src DIR]

Serves a plain ASGI app (a small JSON reply) with the server configuration `farebox
serve` runs (`gateway.server.server_config`: httptools, uvloop, Farebox's protocol) and
sends it 50 requests on one connection from a thread of the same process. The client's
sends are `sendto`; the server's response writes are `write` (head and body apart) or
`writev` (together, `HeadWithBody`). `--src` runs another checkout's `gateway` (an A/B).

`--cpu N` times the server instead (no strace): N requests per round, five rounds, and
prints the server thread's CPU per request (µs, best and median round): what uvicorn,
Farebox's protocol and the write cost per request, with a trivial app behind them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import statistics
import sys
import threading
import time
from typing import Any

REQUESTS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--src", help="import gateway from this checkout")
    parser.add_argument("--cpu", type=int, help="requests per round: time the server")
    args = parser.parse_args()
    if args.src:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, args.src)
    import uvicorn
    from starlette.responses import JSONResponse

    from gateway.server import server_config
    from gateway.settings import Settings

    rounds = 5 if args.cpu else 1
    per_round = args.cpu or REQUESTS
    marks: list[float] = []  # the server thread's CPU clock at the start of each round

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["path"] == "/mark":
                marks.append(time.thread_time())
            await receive()
            await JSONResponse({"ok": True})(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = server_config(app, Settings(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    def client() -> None:
        while not server.started:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port)) as conn:
            for _ in range(rounds):
                for i in range(per_round + 1):  # the first of a round marks its start
                    path = b"/mark" if i == 0 and args.cpu else b"/"
                    conn.sendall(
                        b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
                    )
                    data = b""
                    while b'{"ok":true}' not in data:
                        data += conn.recv(65536)
            if args.cpu:
                conn.sendall(b"POST /mark HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
                while b'{"ok":true}' not in conn.recv(65536):
                    pass
        server.should_exit = True

    threading.Thread(target=client, daemon=True).start()
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(server.serve(sockets=[sock]))
    if not args.cpu:
        print(f"{REQUESTS} requests served")
        return
    per_request = [(b - a) / per_round * 1e6 for a, b in itertools.pairwise(marks)]
    best, median = min(per_request), statistics.median(per_request)
    print(json.dumps({"src": args.src, "us_per_req": round(best, 2), "median": round(median, 2)}))


if __name__ == "__main__":
    main()
