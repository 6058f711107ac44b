"""perf-floor's mock upstream, counting the TCP connections it accepts.

    FAREBOX_PERF_FLOOR=../shared/perf-floor python bench/hotpath_mock.py --port P [mock args]

Runs `mock_upstream.py` unchanged but for two routes: `GET /bench/connections` answers
`{"connections": N, "messages": M}`, the connections accepted and the Messages requests
answered (2xx) since start, and `POST /v1/messages` is
Anthropic's Messages API, whole or streamed (bench/mock_messages.py), for the native
Messages path. Upstream connections opened
per request are read here because the box's /proc/net/snmp ActiveOpens also counts every
other process's connections (other tests share the network namespace).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("FAREBOX_PERF_FLOOR", str(Path.cwd())))

import mock_messages
import mock_upstream

ACCEPTED = {"connections": 0, "messages": 0}


class CountingConn(mock_upstream.Conn):
    """The mock's protocol, plus a count of accepted connections and a route to read it,
    and Anthropic's Messages API."""

    def connection_made(self, transport: Any) -> None:
        ACCEPTED["connections"] += 1
        super().connection_made(transport)

    def _route(self, method: str, path: str, body: bytes, keep_alive: bool) -> None:
        if method == "GET" and path == "/bench/connections":
            self._simple(b"200 OK", ACCEPTED, keep_alive)
            return
        if method == "POST" and path == "/v1/messages":
            self._messages(body, keep_alive)
            return
        super()._route(method, path, body, keep_alive)

    def _messages(self, body: bytes, keep_alive: bool) -> None:
        mock_upstream.STATS["requests"] += 1
        number, tokens = mock_upstream.STATS["requests"], mock_upstream.ARGS.tokens
        try:
            req = mock_upstream.loads(body)
        except ValueError:
            req = None
        refused = mock_messages.refusal(req)
        if refused is not None:
            payload = mock_messages.error_body(refused)
            head = mock_upstream._head(
                "400 Bad Request", b"application/json", len(payload), keep_alive
            )
        elif req.get("stream"):
            ACCEPTED["messages"] += 1
            payload = mock_messages.stream(req, number, tokens)
            head = mock_upstream._head("200 OK", b"text/event-stream", None, keep_alive)
        else:
            ACCEPTED["messages"] += 1
            payload = mock_messages.whole(req, number, tokens)
            head = mock_upstream._head("200 OK", b"application/json", len(payload), keep_alive)
        self.transport.write(head + payload)
        if not keep_alive:
            self.transport.close()


if __name__ == "__main__":
    mock_upstream.Conn = CountingConn  # main() builds the server from the module's Conn
    mock_upstream.main()
