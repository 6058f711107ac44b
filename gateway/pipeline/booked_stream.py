"""A streamed reply whose attempt is booked exactly once, however the stream ends.

Shared by the chat relay (`relay.Relay`) and the typed-event relays
(`event_relay.EventRelay`): the body's generator books in its `finally`; `close` books a
body that was stopped early or never started, and `BookedStreamResponse` calls it even
when the response could not start (the client left, a header the server refused), when
a plain generator would never run its clean-up and the paid call would leave no row.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.drain import Shield
from gateway.errors import FareboxError

_END: Message = {"type": "http.response.body", "body": b"", "more_body": False}
_CONTENT_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")  # as Starlette's


class BookedStream:
    """An SSE body that books its attempt once: `_run` yields it, `_settle` books it."""

    _body: AsyncGenerator[bytes, None] | None = None
    settling = False
    """Set by `_run` when its body is over and it books: a disconnect no longer cancels it."""
    ends = False
    """Set by `_run` before it yields the body's last bytes, booked: the response sends the
    body's end with them (one write, not two)."""
    on_wait: Callable[[], None] | None = None
    """Set by the response: called (once) before the body first waits on its upstream."""
    rest: Callable[[], Coroutine[Any, Any, None]] | None = None
    """What is left of the booking once the body's last bytes are sent (`finish.Booking`:
    the ledger row, the metrics, the prompt's history): set by `_run` with `ends`, run by
    the body after that send (`_book_rest`), or by `close` when it never comes back."""

    def _shield(self) -> Shield:
        """`drain.Shield`: the native cut's count in a chat request (no anyio scope there),
        anyio's shield under a route's scope: the booking of a cut stream runs to its end
        either way."""
        return Shield()

    async def _settle_shielded(self, error: FareboxError | None, cancelled: bool) -> None:
        """`_settle` under the shield, which is entered only if the booking waits.

        A booking that never suspends (usage reported, in-process state, no quota: the
        usual stream) cannot be cancelled, so it needs no shield (an anyio scope, outside
        the chat path, is 3.7-5.3 us to enter and leave here). One that suspends enters
        the shield at its first wait, before the loop runs anything else, and is resumed
        under it (`_Resumed`), as if it had been awaited inside it from the start.
        """
        await self._shielded(self._settle(error, cancelled))

    async def _shielded(self, booking: Coroutine[Any, Any, None]) -> None:
        """Run `booking`, entering the shield only at its first wait (`_settle_shielded`)."""
        try:
            waiting = booking.send(None)
        except StopIteration:
            return
        with self._shield():
            await _Resumed(booking, waiting)

    async def _book_rest(self) -> None:
        """Run what is left of the booking (`rest`), once, shielded as `_settle` is."""
        rest, self.rest = self.rest, None
        if rest is not None:
            await self._shielded(rest())

    def _will_wait(self) -> None:
        """Before a wait on the upstream: from now on, a client who leaves stops the body."""
        start, self.on_wait = self.on_wait, None
        if start is not None:
            start()

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._body = self._run()
        return self._body

    async def close(self) -> None:
        """Book the attempt if the body did not run to its end (or never started)."""
        if self._body is not None:
            await self._body.aclose()  # a started body books itself in its `finally`
        await self._settle(None, cancelled=True)  # a no-op once booked
        await self._book_rest()  # a no-op unless the body's last send never came back

    def _run(self) -> AsyncGenerator[bytes, None]:
        raise NotImplementedError

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        raise NotImplementedError


class _Resumed:
    """Await a coroutine already run to its first wait (`waiting`: what it yielded there).

    What `await coroutine` does from that point on: each value it yields goes to the
    task, and what the task sends or throws in (a result, a cancellation) goes back to it.
    """

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._coroutine, self._waiting = coroutine, waiting

    def __await__(self) -> Generator[Any, Any, None]:
        coroutine, waiting = self._coroutine, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:
                try:
                    waiting = coroutine.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    waiting = coroutine.send(sent)
                except StopIteration:
                    return


class BookedStreamResponse(Response):
    """A streamed reply that books its attempt even if not one byte of it was sent.

    Plain asyncio rather than Starlette's `StreamingResponse`, whose task group (a task,
    cancel scopes, a disconnect listener per stream) was 10-15% of the loop's CPU under 64
    streams: the body is sent from the request's own task, and one task waits on
    `receive` for the client to leave (servers on ASGI spec 2.3, like uvicorn, drop a send
    after a disconnect without a word) and then cancels the body, unless it is already
    booking. `background` runs after the last byte, as with Starlette's.

    That watcher starts when the body first waits on its upstream (`BookedStream.on_wait`),
    not before: a stream whose upstream sent it all at once, as a fast server does a short
    answer, is relayed without waiting and needs no watcher (a task, a `receive` and a
    cancel per stream). Until then the body only sends, and a send to a client who left
    returns at once, so the body comes to that wait and the watcher finds the disconnect.
    """

    media_type = "text/event-stream"
    _receive: Receive
    _task: asyncio.Task[Any]  # the request's, which sends the body (found by `_start_watch`)

    def __init__(self, body: BookedStream, headers: dict[str, str]) -> None:
        self.status_code = 200
        self.background = None
        # Starlette's `init_headers`, for this response: no body to measure, one media type.
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        for name, _ in raw:  # looked for in place: no dict of them built to ask (~1 us)
            if name == b"content-type":
                break
        else:
            raw.append(_CONTENT_TYPE)
        self.raw_headers = raw
        self._booked = body
        self._left = False  # the client left and the body was cancelled for it
        self._watcher: asyncio.Task[None] | None = None  # started by the body's first wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._booked.on_wait = self._start_watch
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send(start | {"headers": self.raw_headers})
            body = self._booked
            async for chunk in body:
                if body.ends:  # the last bytes, booked: the end of the body goes with them
                    self._stop_watch()
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                else:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not body.ends:
                self._stop_watch()  # the end of the body is not a client leaving
                await send(_END)
        except asyncio.CancelledError:
            if not self._left:
                raise
            self._task.uncancel()  # our own cancel: the client left, which is no error
        finally:
            self._stop_watch()
            booked = self._booked
            # Stopped before its end, or never started; or its last send raised, and the
            # rest of its booking (`rest`) is still to run.
            if not booked.settling or booked.rest is not None:
                with Shield():  # held against an anyio scope's cut and the native one
                    await booked.close()
        if self.background is not None:
            await self.background()

    def _start_watch(self) -> None:
        # Called by the body, so in the task that sends it. Found here, not per response:
        # `current_task()` costs a getpid syscall (CPython's fork check), and a stream
        # relayed without a wait needs no task at all.
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._watcher = task.get_loop().create_task(self._watch(self._receive, task))

    def _stop_watch(self) -> None:
        self._booked.on_wait = None
        if self._watcher is not None:
            self._watcher.cancel()

    async def _watch(self, receive: Receive, body: asyncio.Task[Any]) -> None:
        """Cancel the body when the client leaves (not once it is booking: that must end)."""
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a server that cannot tell: the body's sends will
            return
        if not self._booked.settling:
            self._left = True
            body.cancel()
