"""A TCP proxy for outage tests: stop it and PostgreSQL is unreachable, start it and it is back.

The machine's real PostgreSQL serves other tests at the same time, so an outage is
simulated here instead of stopping the server.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forward 127.0.0.1:<port> to a target; `stop()` refuses and cuts every connection."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listen (again, on the same port after the first start)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and cut live connections, as a crashed server would."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        # Handlers are tasks asyncio created; wait for them so none outlives the test.
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        """Pipe one client connection to the target and back."""
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(client)
        try:
            upstream_reader, upstream = await asyncio.open_connection(
                self.target_host, self.target_port
            )
        except OSError:
            client.transport.abort()
            self._forget(task, client)
            return
        self._writers.add(upstream)
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream), self._pipe(upstream_reader, client)
            )
        finally:
            self._forget(task, client, upstream)

    def _forget(self, task: asyncio.Task[None], *writers: asyncio.StreamWriter) -> None:
        """Close and stop tracking a finished connection."""
        for writer in writers:
            writer.transport.abort()
            self._writers.discard(writer)
        self._handlers.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy bytes until either side goes away."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
