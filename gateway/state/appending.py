"""The parts of a joined call (`CommandBatch.script_appending`, `script_gathering`): many
callers' writes sent as one script call, each caller answered.

A request's prompt record is pushed onto its caller's history list and its task's. The
records of concurrent requests go in one call, whatever their keys: `Pushes` gathers
them, each with the keys it goes to, and is turned into the call's words only as its
batch leaves; `Replies` answers every caller with the one reply.

A request of a task adds its cost to the task's total and is told the new total. The
additions of concurrent requests go in one call too: `Gathered` lays out each caller's
keys and args after the others' (a script that handles each key with a fixed number of
args and answers a value per key), and `Parts` answers each caller with its keys' values.
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

    @staticmethod
    def alone(head: list[Any], keys: list[Any], item: Any) -> list[Any]:
        """The ARGV of one push on its own: as `add` lays it out after `head`."""
        count = len(keys)
        return [*head, count, *range(1, count + 1), item]

    def __init__(self, sha: str, head: list[Any]) -> None:
        self.sha, self.head = sha, head
        self.keys: list[Any] = []
        self._index: dict[Any, int] = {}
        self.pushes: list[Any] = []

    def add(self, keys: list[Any], item: Any) -> None:
        """Push `item` onto each of `keys`, after the pushes added before it (`item`: one
        value, the record)."""
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


class Gathered:
    """A gathering call's words, built when its batch leaves (`tuple(gathered)`).

    `EVALSHA sha numkeys KEYS... ARGV...`: each caller's keys after the ones before (a key
    twice if two callers name it), and its args likewise, so that the script meets each
    caller's keys in the order the calls were made, as if each were its own call.
    """

    __slots__ = ("_args", "ends", "keys", "sha")

    @staticmethod
    def alone(head: list[Any], keys: list[Any], item: Any) -> list[Any]:
        """The ARGV of one caller's call on its own: `head`, then its args (`item`)."""
        return [*head, *item]

    def __init__(self, sha: str, head: list[Any]) -> None:
        self.sha = sha
        self.keys: list[Any] = []
        self._args: list[Any] = list(head)
        self.ends: list[int] = []  # where each caller's keys end in `keys`

    def add(self, keys: list[Any], item: Any) -> None:
        """A caller's `keys` and their args (`item`: a list, as many per key as the script
        reads per key), after the callers' added before it."""
        self.keys += keys
        self._args += item
        self.ends.append(len(self.keys))

    def args(self) -> list[Any]:
        """The script's ARGV (for its call on its own, after NOSCRIPT)."""
        return self._args

    def __iter__(self) -> Iterator[Any]:
        keys = self.keys
        return iter(("EVALSHA", self.sha, len(keys), *keys, *self._args))


class Parts(Replies):
    """The callers of one gathering call (`gathered`'s, in the order they were added), each
    answered with its part of the one reply: the values of its own keys (the script
    answers a value per key, in KEYS' order)."""

    __slots__ = ("_gathered",)

    def __init__(self, first: asyncio.Future[Any], gathered: Gathered) -> None:
        super().__init__((first,))
        self._gathered = gathered

    def set_result(self, result: Any, /) -> None:
        start = 0
        for future, end in zip(self, self._gathered.ends, strict=True):
            if not future.done():
                future.set_result(result[start:end])
            start = end
