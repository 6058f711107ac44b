"""Count the writes a response takes: run under strace, 50 keep-alive requests to a small app.

    strace -f -c -e trace=write,writev,sendto python bench/response_writes.py [--src DIR]

Serves a plain ASGI app (a small JSON reply) with the server configuration `farebox
serve` runs (`gateway.server.server_config`: httptools, uvloop, Farebox's protocol) and
sends it 50 requests on one connection from a thread of the same process. The client's
sends are `sendto`; the server's response writes are `write` (head and body apart) or
`writev` (together, `HeadWithBody`). `--src` runs another checkout's `gateway` (an A/B).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from typing import Any

REQUESTS = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--src", help="import gateway from this checkout")
    args = parser.parse_args()
    if args.src:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, args.src)
    import uvicorn
    from starlette.responses import JSONResponse

    from gateway.server import server_config
    from gateway.settings import Settings

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
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
            for _ in range(REQUESTS):
                conn.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
                data = b""
                while b'{"ok":true}' not in data:
                    data += conn.recv(65536)
        server.should_exit = True

    threading.Thread(target=client, daemon=True).start()
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(server.serve(sockets=[sock]))
    print(f"{REQUESTS} requests served")


if __name__ == "__main__":
    main()
