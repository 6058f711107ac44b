"""A transport that keeps what a protocol writes, for the server's request-cycle tests."""

from __future__ import annotations

import asyncio
from typing import Any


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.closed = False

    def write(self, data: Any) -> None:
        self.data += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
