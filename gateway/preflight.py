"""What `farebox serve` checks before it starts the app: each failure is one line with its fix.

uvicorn runs the app's lifespan (and so the banner) before it binds its port, and the
lifespan's errors come out as tracebacks. So the port is bound here first (a busy port is
refused before any "serving on" line) and the ledger is reached and migrated here first (a
wrong FAREBOX_DATABASE_URL is one line; `create_app(migrated=True)` then skips the
lifespan's own check).
"""

from __future__ import annotations

import asyncio
import errno
import socket

from gateway.ledger import migrate
from gateway.ledger.diagnosis import FAILURES, explain
from gateway.settings import Settings


class PreflightError(Exception):
    """`farebox serve` cannot start; the message says why and how to fix it."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` (uvicorn listens on it), or PreflightError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind((host, port))
        # Listening now holds the port (a second process could bind a bound socket that
        # does not listen); connections wait in the backlog until the app has started.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PreflightError(_bind_problem(exc, host, port)) from None
    sock.set_inheritable(True)
    return sock


def _bind_problem(exc: OSError, host: str, port: int) -> str:
    other = port + 1 if 0 < port < 65535 else 4001
    choose = f"--port {other}, FAREBOX_PORT={other} or make run PORT={other}"
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is in use (another gateway?): stop it, or {choose}"
        )
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need root): {choose}"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: no such local address: use --host 127.0.0.1 or 0.0.0.0"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def check_ledger(settings: Settings) -> None:
    """Reach the ledger's database and bring its tables up to date, or PreflightError."""
    url = settings.ledger_url()
    try:
        asyncio.run(migrate(url))
    except FAILURES as exc:
        raise PreflightError(explain(exc, url)) from None
