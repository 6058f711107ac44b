"""The parts of an appending call (`CommandBatch.script_appending`): many callers' pushes
sent as one script call, each caller answered.

A request's prompt record is pushed onto its caller's history list and its task's. The
records of concurrent requests go in one call, whatever their keys: `Pushes` gathers
them, each with the keys it goes to, and is turned into the call's words only as its
batch leaves; `Replies` answers every caller with the one reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any


class Pushes:
    """An appending call's words, built when its batch leaves (`tuple(pushes)`).

    `EVALSHA sha numkeys KEYS... head... then, per push: n, its n key indices (1-based,
    into KEYS), its item`. KEYS are the pushes' keys, each once, in the order first met;
    the script reads the pushes in order, as if each were its own call.
    """

    __slots__ = ("_index", "head", "keys", "pushes", "sha")

    def __init__(self, sha: str, head: list[Any]) -> None:
        self.sha, self.head = sha, head
        self.keys: list[Any] = []
        self._index: dict[Any, int] = {}
        self.pushes: list[Any] = []

    def add(self, keys: list[Any], item: Any) -> None:
        """Push `item` onto each of `keys`, after the pushes added before it."""
        index, pushes = self._index, self.pushes
        pushes.append(len(keys))
        for key in keys:
            at = index.get(key)
            if at is None:
                self.keys.append(key)
                at = index[key] = len(self.keys)
            pushes.append(at)
        pushes.append(item)

    def args(self) -> list[Any]:
        """The script's ARGV (for its call on its own, after NOSCRIPT)."""
        return [*self.head, *self.pushes]

    def __iter__(self) -> Iterator[Any]:
        keys = self.keys
        return iter(("EVALSHA", self.sha, len(keys), *keys, *self.head, *self.pushes))


class Replies(list["asyncio.Future[Any]"]):
    """The callers of one appending call (their futures), answered together, each unless
    it gave up (cancelled: it cancels only its own future, never the others' call)."""

    __slots__ = ()

    def done(self) -> bool:
        """Every caller gave up (or has its answer): the call need not be sent."""
        for future in self:  # noqa: SIM110 (`all(...)`'s generator cost more, at c=1)
            if not future.done():
                return False
        return True

    def set_result(self, result: Any, /) -> None:
        for future in self:
            if not future.done():
                future.set_result(result)

    def set_exception(self, exception: BaseException, /) -> None:
        for future in self:
            if not future.done():
                future.set_exception(exception)
