"""Run a start-up step in a forked child, so the process that serves never holds its imports.

`farebox serve` migrates the ledger before it starts the app (gateway.preflight). On a
ledger behind head (a first start, an upgrade) that imports Alembic, Mako and their
helpers: 9.6 MiB of RSS in a process that never needs them again (measured: `migrate()`
on a fresh SQLite file after the app's imports, 103.9 -> 114.5 MiB; on a ledger at head,
+1.0). A forked child has the parent's imports already (no second interpreter start) and
takes what the step loads with it when it exits; the lifespan's own `migrate()` then finds
the ledger at head and imports nothing. Forking before any thread or event loop exists
keeps the child simple: it runs the step, writes one line of outcome, and `os._exit`s.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

# The child's exit status: the step returned, raised the expected error, or anything else.
_DONE, _EXPECTED, _FAILED = 0, 2, 1


class ForkedStepError(RuntimeError):
    """The step failed in the child with an error the caller did not expect."""


def call_forked(step: Callable[[], object], expected: type[Exception] = Exception) -> None:
    """Run `step()` in a forked child; raise `expected(message)` if it raised `expected`.

    Any other failure comes back as `ForkedStepError` with the child's traceback. Where
    there is no `os.fork` (Windows) the step runs in this process.
    """

    def run() -> bytes:
        step()
        return b""

    run.__name__ = getattr(step, "__name__", "step")
    fetch_forked(run, expected)


def fetch_forked(step: Callable[[], bytes], expected: type[Exception] | None = None) -> bytes:
    """Run `step()` in a forked child and return the bytes it returned; raise
    `expected(message)` if it raised `expected`, `ForkedStepError` (with the child's
    traceback) for any other failure. Without `os.fork`, runs in this process."""
    if not hasattr(os, "fork"):
        return step()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _run_child(step, expected, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as said:
        payload = said.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == _EXPECTED and expected is not None:
        raise expected(payload.decode("utf-8", "replace"))
    if code != _DONE:
        message = payload.decode("utf-8", "replace")
        raise ForkedStepError(
            f"{getattr(step, '__name__', 'step')} failed (exit {code}):\n{message}"
        )
    return payload


def _run_child(
    step: Callable[[], bytes], expected: type[Exception] | None, write_end: int
) -> NoReturn:
    code, payload = _DONE, b""
    try:
        payload = step()
    except BaseException as exc:  # the parent reports it; the child must reach os._exit
        if expected is not None and isinstance(exc, expected):
            code, payload = _EXPECTED, str(exc).encode("utf-8", "replace")
        else:
            code, payload = _FAILED, traceback.format_exc().encode("utf-8", "replace")
    try:
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        for stream in (sys.stdout, sys.stderr):  # what the step logged, before _exit
            stream.flush()
    finally:
        os._exit(code)  # no atexit handlers, no parent's buffers written twice
