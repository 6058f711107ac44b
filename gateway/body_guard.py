"""Read every request body whole, within a size limit and a deadline, before any route runs.

A plain ASGI middleware (not `BaseHTTPMiddleware`, which buffers streams and breaks
context propagation). Chat and lint take prompts, up to FAREBOX_MAX_BODY_BYTES; every
other route takes small JSON, up to FAREBOX_MAX_API_BODY_BYTES. A body over its limit
is refused with 413 (at once when Content-Length says so), a body not received within
FAREBOX_BODY_TIMEOUT_S with 408; both close the connection, so the rest of an upload is
never read. The route then reads the buffered body as usual.

The deadline is one timer for every read in progress (`SharedDeadlines`), not a timer made
and cancelled per request as `asyncio.timeout` does: the reads share one length, so
their deadlines fall in the order they started, and only the oldest one still reading
needs a timer.

A body over `JOIN_OFF_LOOP_BYTES` is joined in a worker thread: copying 32 MiB into a
fresh allocation (page faults included) takes 10-30 ms, and `bytes.join` drops the
interpreter lock while it copies, so the loop goes on meanwhile.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Collection
from typing import TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.anthropic_errors import send_path_error
from gateway.errors import BodyTooLargeError, FareboxError, RequestTimeoutError

T = TypeVar("T")

# Routes that take whole prompts (and conversations of them).
JOIN_OFF_LOOP_BYTES = 1024 * 1024  # where CPython's bytes.join releases the lock
PROMPT_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/prefix/lint",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/responses",
        "/v1/completions",
        "/v1/embeddings",
    }
)


class ClientGoneError(Exception):
    """The client disconnected before its body arrived (internal: nobody is left to answer)."""


class Deadline:
    """One wait's deadline: the task waiting (None once done), and whether it expired."""

    __slots__ = ("cancelling", "expired", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[object], cancelling: int) -> None:
        self.when = when
        self.task: asyncio.Task[object] | None = task
        self.cancelling = cancelling  # the task's cancel requests when its wait started
        self.expired = False

    def done(self) -> None:
        """The wait is over (in time or not): the timer leaves the task alone."""
        self.task = None

    def cut_it(self) -> bool:
        """Whether the CancelledError being handled was the deadline's alone (a timeout).

        As `asyncio.timeout`: the deadline's cancel request is withdrawn, and the error is
        a timeout unless someone else asked the task to cancel too.
        """
        if not self.expired:
            return False
        task = asyncio.current_task()
        return task is not None and task.uncancel() <= self.cancelling


class SharedDeadlines:
    """Deadlines of one length on one loop, kept by one timer instead of a timer each.

    `start` queues the current task's deadline (`timeout_s` from now); the waiter calls
    its `done` when the wait is over, and `cut_it` on a CancelledError. Deadlines are
    queued in the order they fall, so the timer waits for the oldest wait still going:
    when it fires, it cancels the waits past their deadline (`expired` says it was this,
    as `asyncio.timeout` does) and waits for the next. Finished waits leave the queue's
    front as later ones start, so it holds about the waits in progress (and those behind
    a slow one). `start` answers None on a loop other than the one it serves while that
    one still runs (a second thread's loop): the caller then uses `asyncio.timeout`.
    """

    __slots__ = ("_loop", "_queue", "_timer", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: deque[Deadline] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> Deadline | None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            other = self._loop
            if other is not None and other.is_running():
                return None
            self._loop, self._queue, self._timer = loop, deque(), None
        # Given the loop: `current_task()` would ask for it again, and each ask is a getpid
        # syscall (CPython checks for a fork), ~0.5-1.5 µs on this box.
        task = asyncio.current_task(loop)
        if task is None:  # pragma: no cover - a wait always runs in a task
            return None
        queue = self._queue
        while queue and queue[0].task is None:  # waits done since: off the front
            queue.popleft()
        deadline = Deadline(loop.time() + self.timeout_s, task, task.cancelling())
        queue.append(deadline)
        if self._timer is None:
            self._timer = loop.call_at(deadline.when, self._fire, queue)
        return deadline

    async def within(self, wait: Awaitable[T]) -> T:
        """Await `wait`; past `timeout_s` it is cancelled and TimeoutError raised."""
        deadline = self.start()
        if deadline is None:  # another thread's loop holds the shared timer
            async with asyncio.timeout(self.timeout_s):
                return await wait
        try:
            return await wait
        except asyncio.CancelledError:
            if deadline.cut_it():
                raise TimeoutError from None
            raise
        finally:
            deadline.done()

    def _fire(self, queue: deque[Deadline]) -> None:
        if queue is not self._queue:  # a timer of a loop since replaced: not ours now
            return
        self._timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        while queue:
            deadline = queue[0]
            task = deadline.task
            if task is None:
                queue.popleft()
            elif deadline.when > now:
                self._timer = loop.call_at(deadline.when, self._fire, queue)
                return
            else:
                queue.popleft()
                deadline.task = None
                deadline.expired = True
                task.cancel()

    def waiting(self) -> int:
        """How many waits are still under their deadline."""
        return sum(1 for deadline in self._queue if deadline.task is not None)


class BodyGuard:
    """Buffer each body under its route's limit and the body deadline, else answer 413/408."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        prompt_limit: int,
        api_limit: int,
        timeout_s: float,
        prompt_routes: Collection[str] = PROMPT_ROUTES,
    ) -> None:
        self.app = app
        self.prompt_limit = prompt_limit
        self.api_limit = api_limit
        self.timeout_s = timeout_s
        self.prompt_routes = prompt_routes
        self.deadlines = SharedDeadlines(timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await self.read(scope, receive, send)
        if body is not None:
            await self.app(scope, _replay(body, receive), send)

    async def read(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The HTTP request's whole body; None once it is refused or its client has gone.

        The model routes' fronts (gateway.front) call it without the middleware around it.
        """
        limit, setting = self._limit(scope["path"])
        try:
            _check_declared(scope, limit, setting)
            body = _in_hand(receive)
            if body is None:
                return await self.deadlines.within(_read(receive, limit, setting))
            if len(body) > limit:
                raise _too_large(len(body), limit, setting)
            return body
        except TimeoutError:
            error = RequestTimeoutError(
                f"request body not received within {self.timeout_s:g} s (FAREBOX_BODY_TIMEOUT_S)"
            )
            await _refuse(send, error, scope["path"])
        except FareboxError as error:
            await _refuse(send, error, scope["path"])
        except ClientGoneError:
            pass
        return None

    def _limit(self, path: str) -> tuple[int, str]:
        if path in self.prompt_routes:
            return self.prompt_limit, "FAREBOX_MAX_BODY_BYTES"
        return self.api_limit, "FAREBOX_MAX_API_BODY_BYTES"


def _too_large(size: int, limit: int, setting: str) -> BodyTooLargeError:
    return BodyTooLargeError(
        f"request body is {size} bytes, over the limit of {limit} bytes ({setting})"
    )


def _check_declared(scope: Scope, limit: int, setting: str) -> None:
    """Refuse at once a body whose Content-Length is over the limit."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise _too_large(int(value), limit, setting)


def _in_hand(receive: Receive) -> bytes | None:
    """The whole body, when the server already holds it (`gateway.http_cycle.Cycle`'s
    `take_body`, the chat path's usual case): no deadline to keep, nothing to await."""
    take = getattr(getattr(receive, "__self__", None), "take_body", None)
    return take() if take is not None else None


async def _read(receive: Receive, limit: int, setting: str) -> bytes:
    """The whole body, refused as soon as it passes `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit, setting)
        chunks.append(chunk)
        if not message.get("more_body", False):
            if size > JOIN_OFF_LOOP_BYTES and len(chunks) > 1:
                return await asyncio.to_thread(b"".join, chunks)
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the buffered body once, then waits on the client (disconnects)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def _refuse(send: Send, error: FareboxError, path: str = "") -> None:
    """Answer `error` and close the connection: the rest of the body is not read."""
    await send_path_error(send, error, path)
