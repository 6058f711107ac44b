"""perf-floor's mock upstream, counting the TCP connections it accepts.

    FAREBOX_PERF_FLOOR=../shared/perf-floor python bench/hotpath_mock.py --port P [mock args]

Runs `mock_upstream.py` unchanged but for one route: `GET /bench/connections` answers
`{"connections": N}`, the connections accepted since start. Upstream connections opened
per request are read here because the box's /proc/net/snmp ActiveOpens also counts every
other process's connections (other tests share the network namespace).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("FAREBOX_PERF_FLOOR", str(Path.cwd())))

import mock_upstream

ACCEPTED = {"connections": 0}


class CountingConn(mock_upstream.Conn):
    """The mock's protocol, plus a count of accepted connections and a route to read it."""

    def connection_made(self, transport: Any) -> None:
        ACCEPTED["connections"] += 1
        super().connection_made(transport)

    def _route(self, method: str, path: str, body: bytes, keep_alive: bool) -> None:
        if method == "GET" and path == "/bench/connections":
            self._simple(b"200 OK", ACCEPTED, keep_alive)
            return
        super()._route(method, path, body, keep_alive)


if __name__ == "__main__":
    mock_upstream.Conn = CountingConn  # main() builds the server from the module's Conn
    mock_upstream.main()
