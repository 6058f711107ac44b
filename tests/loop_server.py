"""A raw asyncio TCP server on 127.0.0.1, in a thread with its own event loop.

The tests' hand-written upstreams (hostile, counting, batching) speak HTTP byte by byte;
this is the part they share: start on a free port, and stop so that nothing is left for
the garbage collector (the listener, every connection's task, the loop itself), since a
later test's `gc.collect()` would otherwise finalise them and fail on it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopServer:
    """Subclasses define `_serve(reader, writer)`; `start()` then `stop()` run it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()  # connections not closed yet
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """`_serve` one connection, remembered until its transport closes."""
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        finally:
            if writer.transport.is_closing():
                self._writers.discard(writer)

    def stop(self) -> None:
        """Close the listener and end the connections still served, then the loop."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        # A cancelled handler leaves its connection open (asyncio closes the transport only
        # for a handler that raised): a client's kept-alive connection would outlive the
        # loop, and the collector would find the socket later, in another test.
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()
        await asyncio.sleep(0)  # the aborts' connection_lost callbacks close the sockets
