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

# The child's exit status: the step returned, raised the expected error, or anything else.
_DONE, _EXPECTED, _FAILED = 0, 2, 1


class ForkedStepError(RuntimeError):
    """The step failed in the child with an error the caller did not expect."""


def call_forked(step: Callable[[], object], expected: type[Exception] = Exception) -> None:
    """Run `step()` in a forked child; raise `expected(message)` if it raised `expected`.

    Any other failure comes back as `ForkedStepError` with the child's traceback. Where
    there is no `os.fork` (Windows) the step runs in this process.
    """
    if not hasattr(os, "fork"):
        step()
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _run_child(step, expected, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as said:
        message = said.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == _EXPECTED:
        raise expected(message)
    if code != _DONE:
        raise ForkedStepError(
            f"{getattr(step, '__name__', 'step')} failed (exit {code}):\n{message}"
        )


def _run_child(step: Callable[[], object], expected: type[Exception], write_end: int) -> None:
    code, message = _DONE, ""
    try:
        step()
    except expected as exc:
        code, message = _EXPECTED, str(exc)
    except BaseException:  # the parent reports it; the child must reach os._exit
        code, message = _FAILED, traceback.format_exc()
    try:
        with os.fdopen(write_end, "wb") as out:
            out.write(message.encode("utf-8", "replace"))
        for stream in (sys.stdout, sys.stderr):  # what the step logged, before _exit
            stream.flush()
    finally:
        os._exit(code)  # no atexit handlers, no parent's buffers written twice


def fetch_forked(step: Callable[[], bytes]) -> bytes:
    """Run `step()` in a forked child and return the bytes it returned; `ForkedStepError`
    (with the child's traceback) if it raised. Without `os.fork`, runs in this process."""
    if not hasattr(os, "fork"):
        return step()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        code, payload = _DONE, b""
        try:
            payload = step()
        except BaseException:  # the parent reports it; the child must reach os._exit
            code, payload = _FAILED, traceback.format_exc().encode("utf-8", "replace")
        try:
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as said:
        payload = said.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != _DONE:
        message = payload.decode("utf-8", "replace")
        raise ForkedStepError(
            f"{getattr(step, '__name__', 'step')} failed (exit {code}):\n{message}"
        )
    return payload
