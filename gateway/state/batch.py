"""Redis calls of concurrent requests, sent together: one pipeline per round trip.

Each request reads its prefix history before the upstream call and remembers its prompt
after it; a request of a task also reads its pinned effort and adds to its total. Sent
one by one, every call pays redis-py's own costs (a pooled connection
taken and given back, a packed command, a deadline, a reply parsed, a write and a read
on the socket): about 70 µs of CPU a call, more than the rest of the Redis work. Calls
made while a batch is on its way wait for it and go out together in the next, in one
pipeline (not a transaction: each command or script is atomic on its own), so under load a batch
carries the calls of many requests and each pays a share of one round trip; an idle
gateway sends each call at once, as before.

Every caller gets its own reply, or the exception the batch met (a dead connection, a
timeout): the caller's fallback (gateway/state/fallback.py) treats it as it treated a
failed call of its own. A script Redis no longer knows (restarted, SCRIPT FLUSH) is
loaded and called again for that caller alone, after the others have their replies.

With a deadline (`deadline_s`), a batch is sent under one timer that ends when its
oldest call's deadline does: every caller then has its answer, or a `TimeoutError`, no
later than its own deadline, without a timer of its own (`asyncio.timeout` per call
cost ~5.5 µs here, two per small request; one per batch carries a whole batch's calls).

A batch is written and read here, not through redis-py's `Pipeline`: its commands packed
by hiredis in C (~1.6 µs a script call against ~10 µs for redis-py's packer), written
and its replies read without a timer each (the batch's deadline bounds them all;
redis-py's socket timeout, which wraps a write in `asyncio.wait_for`, a task and a timer,
and sets a timer per reply, still bounds a batch without a deadline), and none
of the pipeline's per-command bookkeeping. The replies are Redis's own, as a pipeline
without response callbacks gives them (bytes, None, lists, integers).

The sender keeps its pooled connection from one batch to the next (a busy gateway sends
batch after batch; after a batch of several calls it waits one turn of the loop for
more), and through an idle spell too: redis-py's `get_connection` and `release` (a
condition, a timer, the pool's lock, its observability hooks) cost more than the exchange
of a small batch itself, and at concurrency 1 every call came after an idle spell (the
state calls of a small request: 657k -> 392k instructions, bench/state_calls.py -c 1
--callgrind). After an idle spell it is checked (`connection.usable`: connected, nothing left to
read, not closed by Redis, else connected again), as is one the pool lends. It is given
back when an exchange fails, when Redis forgot its scripts, when shared state reconnects
after an outage (`release_idle`) and when it closes; a pool of one connection gets it back
after every spell, so other calls never wait for it.

Pushes onto lists (`script_appending`: a request's prompt record pushed onto its caller's
and its task's history) go further: every such call made before a batch leaves is one
script call in it, whatever its keys (gateway/state/appending.py). Redis spent 12.7 µs of
CPU on the remember script for one record, and ~3.4 µs a record for four in one call
(bench/redis_history.py): under load Redis's CPU caps every replica's throughput together.
Applying a later caller's push with an earlier one's is a legal order: both calls are in
flight at once, and a write moved earlier is seen sooner, never later. Reads are never
moved: a step that follows its previous step's push still sees it.

Additions to counters (`script_gathering`: a task request's cost added to its task's
total) are joined the same way, each caller answered with its own keys' values (the new
totals): requests of different tasks, or of one task, in one script call, in the order
they were made (gateway/state/appending.py's `Gathered` and `Parts`).

Reads by script (`script_reading`: a task request's history, its task's list and its
caller's) are joined too, but moved later, never earlier: the joined read goes at the end
of the first batch that carries every call made before its last reader. Each reader sees
every write made before it; a write made after it may be seen too, as it may (both were
in flight at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Protocol, cast

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from gateway.state.appending import Gathered, Parts, Pushes, Replies
from gateway.state.connection import Command, pack, send_unbounded, usable

MAX_BATCH = 256  # calls in one pipeline; the rest wait for the next
MAX_JOINED = 64  # callers in one joined call: a bound on one script's run

Again = Callable[[], Awaitable[Any]]
"""Makes a script's call on its own, loading it first (after NOSCRIPT)."""


class Reply(Protocol):
    """Where a call's answer goes: its caller's future, or its callers' (`Replies`)."""

    def done(self) -> bool: ...
    def set_result(self, result: Any, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


Call = tuple[Command | Pushes | Gathered, Again | None, Reply, float]
"""A call's command, its retry after NOSCRIPT, its reply, and when it was made (loop time)."""


Joined = Pushes | Gathered
"""A joined call's words, added to by each caller until it leaves."""
Shared = tuple[Call, Joined, Replies]
"""A queued joined call of several callers: the call, its words, its callers."""
Lone = tuple[Call, type[Joined], AsyncScript, list[Any], list[Any], Any]
"""A queued joinable call of one caller, a plain script call (its reply the caller's own
future, as `script`'s is): the call, and its kind, script, head, keys and item, from which
the first to join makes it a `Shared` one."""


def _share(
    call: Call, kind: type[Joined], script: AsyncScript, head: list[Any], keys: list[Any], item: Any
) -> Shared:
    """A lone call (one caller's `keys` and `item`) made one that answers every caller who
    joins it: its words, its retry after NOSCRIPT, its callers (the lone caller first)."""
    joined = kind(script.sha, head)
    joined.add(keys, item)
    again = lambda: script(keys=joined.keys, args=joined.args())  # noqa: E731
    first = cast("asyncio.Future[Any]", call[2])  # a lone call's reply: its caller's own
    callers = Parts(first, joined) if isinstance(joined, Gathered) else Replies((first,))
    return (joined, again, callers, call[3]), joined, callers


class _Reads:
    """A read call for the end of a batch (`script_reading`): one reader's plain script
    call, until a second joins and makes it a `Gathered` one."""

    __slots__ = ("call", "first", "needs", "script", "shared")

    def __init__(self, call: Call, script: AsyncScript, keys: list[Any], needs: int) -> None:
        self.call, self.script, self.first = call, script, keys
        self.needs = needs  # calls queued before its last reader: all leave before it
        self.shared: Shared | None = None

    def full(self) -> bool:
        return self.shared is not None and len(self.shared[2]) >= MAX_JOINED

    def join(self, keys: list[Any], reply: asyncio.Future[Any]) -> None:
        """`keys` read for `reply` too, in the same call."""
        if self.shared is None:  # the first to join
            self.shared = _share(self.call, Gathered, self.script, [], self.first, [])
            self.call = self.shared[0]
        self.shared[1].add(keys, [])
        self.shared[2].append(reply)


class CommandBatch:
    """Sends the commands of many callers in one pipeline, one batch on the wire at a time."""

    def __init__(self, client: aioredis.Redis, deadline_s: float | None = None):
        self._client = client
        # The most a call may wait for its reply, counted from the call (None: unbounded,
        # the caller bounds it).
        self.deadline_s = deadline_s
        self._waiting: list[Call] = []
        # Joinable calls still waiting (`script_appending`, `script_gathering`), by kind,
        # script and head: later calls join them.
        self._joinable: dict[Hashable, Shared | Lone] = {}
        # Reads for the end of a batch (`script_reading`), in order, and the one that
        # takes more readers, by script; calls queued and taken so far (`_Reads.needs`).
        self._reads: list[_Reads] = []
        self._reading: dict[str, _Reads] = {}
        self._queued = self._taken = 0
        self._sender: asyncio.Task[None] | None = None
        # The sender's connection between two batches (see the module); `_idle`: taken
        # back after an idle spell, so checked first.
        self._held: AbstractConnection | None = None
        self._idle = False
        self.sent = 0  # pipelines sent, for tests and benchmarks

    # `script` and `command` are queued when called and hand back the call's future, which
    # the caller awaits: no coroutine of their own (two frames a call on every resume).

    def script(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> asyncio.Future[Any]:
        """Run `script` with `keys` and `args` in the next batch; await its reply."""
        return self._call(
            ("EVALSHA", script.sha, len(keys), *keys, *args), lambda: script(keys=keys, args=args)
        )

    def script_appending(
        self, script: AsyncScript, head: list[Any], keys: list[Any], item: Any
    ) -> asyncio.Future[Any]:
        """Push `item` onto `keys` with `script` in the next batch; await its reply.

        The pushes of every call with the same `script` and `head` made before that batch
        leaves are one call, with the args `Pushes` lays out: the script must apply them
        in order, each as if it were its own call.
        """
        return self._joining(Pushes, script, head, keys, item)

    def script_gathering(
        self, script: AsyncScript, keys: list[Any], args: list[Any]
    ) -> asyncio.Future[Any]:
        """Run `script` with `keys` and `args` in the next batch; await its values of `keys`.

        Every call of `script` made before that batch leaves is one call, each caller's
        keys and args after the ones before (`Gathered`): the script must handle each key
        with the same number of args, in order, and answer a list of a value per key.
        """
        return self._joining(Gathered, script, [], keys, args)

    def _joining(
        self,
        kind: type[Joined],
        script: AsyncScript,
        head: list[Any],
        keys: list[Any],
        item: Any,
    ) -> asyncio.Future[Any]:
        """Join the waiting call of `kind`, `script` and `head`, or queue one of its own."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        group = (kind, script.sha, *head)
        queued = self._joinable.get(group)
        if queued is not None:
            shared = self._shared(group, queued) if len(queued) == 6 else queued
            if shared is not None and len(shared[2]) < MAX_JOINED:
                shared[1].add(keys, item)
                shared[2].append(reply)
                return reply
        args = kind.alone(head, keys, item)
        again = lambda: script(keys=keys, args=args)  # noqa: E731
        call: Call = (("EVALSHA", script.sha, len(keys), *keys, *args), again, reply, loop.time())
        self._joinable[group] = (call, kind, script, head, keys, item)
        self._queue(call)
        return reply

    def _shared(self, group: Hashable, lone: Lone) -> Shared | None:
        """The lone call of `group` made one that answers every caller, in its place in the
        queue (None if it left with a batch: never, as batches close their calls)."""
        call = lone[0]
        at = _last_index(self._waiting, call)
        if at is None:
            return None
        shared = _share(*lone)
        self._waiting[at] = shared[0]
        self._joinable[group] = shared
        return shared

    def script_reading(self, script: AsyncScript, keys: list[Any]) -> asyncio.Future[Any]:
        """Run the read `script` with `keys` (no args); await its values of `keys`.

        Every call of `script` made before the batch that sends it leaves is one call,
        each caller's keys after the ones before (`Gathered`): the script must answer a
        list of a value per key, in order. It goes at the end of the first batch that
        carries every call made before its last reader (see the module).
        """
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        reads = self._reading.get(script.sha)
        if reads is not None and not reads.full():
            reads.join(keys, reply)
            reads.needs = self._queued
            return reply
        again = lambda: script(keys=keys, args=[])  # noqa: E731
        call: Call = (("EVALSHA", script.sha, len(keys), *keys), again, reply, loop.time())
        reads = self._reading[script.sha] = _Reads(call, script, keys, self._queued)
        self._reads.append(reads)
        self._wake()
        return reply

    def command(self, *words: Any) -> asyncio.Future[Any]:
        """Send the command `words` (`"GET", key`) in the next batch; await Redis's reply."""
        return self._call(words, None)

    def _call(self, command: Command, again: Again | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._queue((command, again, reply, loop.time()))
        return reply

    def _queue(self, call: Call) -> None:
        self._waiting.append(call)
        self._queued += 1
        if self._sender is None:  # `_wake`'s, inline: every call comes through here
            self._sender = asyncio.create_task(self._send_all(), name="redis-batch")

    def _wake(self) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_all(), name="redis-batch")

    async def aclose(self) -> None:
        """Stop sending: calls still waiting fail as if Redis were away (callers fall back)."""
        sender = self._sender
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        # A sender cancelled before it ever ran left its calls waiting: answer them too.
        self._sender = None
        self._drop_waiting()
        await self._release_held()

    async def release_idle(self) -> None:
        """Give the connection kept through an idle spell back to the pool (after an outage
        it is likely dead, and the pool's `disconnect` drops only the connections it holds)."""
        if self._sender is None:
            await self._release_held()

    async def _send_all(self) -> None:
        """Send batches until no call waits; the task ends with the last one."""
        try:
            linger = False
            while True:
                while self._waiting or self._reads:
                    batch = self._waiting[:MAX_BATCH]
                    del self._waiting[:MAX_BATCH]
                    self._taken += len(batch)
                    if self._joinable:
                        self._close_joinable(batch)
                    reads = self._add_reads(batch) if self._reads else False
                    linger = len(batch) > 1
                    await self._send(batch, reads)
                if not linger:
                    break
                # Callers of a busy gateway (a batch of several calls), woken by the
                # replies, often call again at once: one turn of the loop for them, with
                # the connection in hand. A lone call's caller (concurrency 1) seldom does.
                linger = False
                await asyncio.sleep(0)
        finally:
            self._sender = None
            if self._keeps_idle():
                self._idle = True  # checked when next taken, as the pool would
            else:
                await self._release_held()
            if self._waiting or self._reads:  # stopped: no call is left hanging
                self._drop_waiting()

    def _drop_waiting(self) -> None:
        """Answer every call not sent with an outage; forget them."""
        _fail([call[2] for call in self._waiting] + [reads.call[2] for reads in self._reads])
        self._waiting.clear()
        self._joinable.clear()
        self._reads.clear()
        self._reading.clear()

    def _add_reads(self, batch: list[Call]) -> bool:
        """The reads whose readers' earlier calls have all left, at the end of `batch`;
        whether any went."""
        taken, kept, count = self._taken, [], len(batch)
        for reads in self._reads:
            if reads.needs > taken:
                kept.append(reads)
                continue
            batch.append(reads.call)
            if self._reading.get(reads.script.sha) is reads:
                del self._reading[reads.script.sha]
        self._reads = kept
        return len(batch) > count

    def _close_joinable(self, batch: list[Call]) -> None:
        """The batch's joinable calls take no more callers: later ones start a call anew."""
        if not self._waiting:  # the batch took every call
            self._joinable.clear()
            return
        leaving = {id(call) for call in batch}
        for group, queued in list(self._joinable.items()):
            if id(queued[0]) in leaving:
                del self._joinable[group]

    async def _send(self, batch: list[Call], reads: bool = False) -> None:
        """Send `batch` under its oldest call's deadline: its first's, as calls are queued
        in order, unless it ends with `reads` (`_add_reads`), which may be older."""
        live = [call for call in batch if not call[2].done()]  # a caller may have given up
        if not live:
            return
        try:
            if self.deadline_s is None:
                await self._send_live(live)
            else:
                made = min([call[3] for call in live]) if reads else live[0][3]
                async with asyncio.timeout_at(made + self.deadline_s):
                    await self._send_live(live)
        except asyncio.CancelledError:
            _fail([call[2] for call in live])
            raise
        except Exception as exc:  # every caller decides for itself whether Redis is away
            for call in live:
                if not call[2].done():
                    call[2].set_exception(exc)

    async def _send_live(self, live: list[Call]) -> None:
        self.sent += 1
        replies = await self._exchange([tuple(call[0]) for call in live])
        forgotten: list[tuple[Again, Reply]] = []
        for (_, again, reply, _), answer in zip(live, replies, strict=True):
            if isinstance(answer, NoScriptError) and again is not None:
                forgotten.append((again, reply))
            elif reply.done():
                continue
            elif isinstance(answer, Exception):
                reply.set_exception(answer)
            else:
                reply.set_result(answer)
        if forgotten:  # Redis forgot its scripts (a restart): load, call again
            # On the connection this batch had, given back first (the pool's newest, as
            # before it was kept): an idle one from before the restart would be dead.
            await self._release_held()
        for again, reply in forgotten:
            await _again(again, reply)

    def _keeps_idle(self) -> bool:
        """Whether the connection stays through an idle spell: not a pool's only one."""
        return getattr(self._client.connection_pool, "max_connections", 2) > 1

    async def _release_held(self) -> None:
        held, self._held, self._idle = self._held, None, False
        if held is not None:
            await self._client.connection_pool.release(held)

    async def _exchange(self, commands: list[Command]) -> list[Any]:
        """Write `commands` in one go on a pooled connection and read their replies, an
        error reply as its exception (NOSCRIPT as `NoScriptError`) in its place.

        A connection that fails or is cancelled mid-way is closed by redis-py (its send
        and read do that) and given back at once, so the pool never hands out one with
        replies left unread. One whose replies were all read is kept for the next batch
        (`_held`), through an idle spell too (see the module).
        """
        pool = self._client.connection_pool
        connection, self._held = self._held, None
        # Lent by the pool, or kept through an idle spell: Redis may have closed it.
        fresh = connection is None or self._idle
        if connection is None:
            connection = await pool.get_connection()
        self._idle = False
        try:
            if fresh:
                await usable(connection)
            if self.deadline_s is None:
                await connection.send_packed_command(pack(connection, commands))
            else:  # the whole exchange's deadline bounds the write too
                await send_unbounded(connection, pack(connection, commands))
            # Under a deadline (the whole exchange's), no timer per reply: `math.inf`.
            timeout = None if self.deadline_s is None else math.inf
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await connection.read_response(timeout=timeout))
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            await pool.release(connection)
            raise
        self._held = connection  # every reply read: ready for the next batch's commands
        return replies


def _last_index(calls: list[Call], call: Call) -> int | None:
    """Where `call` itself is in `calls` (looked for from the end, where it most likely is)."""
    for at in range(len(calls) - 1, -1, -1):
        if calls[at] is call:
            return at
    return None


def _fail(replies: list[Reply]) -> None:
    """Answer calls the batch will not send with an outage, not a cancel of their callers."""
    for reply in replies:
        if not reply.done():
            reply.set_exception(RedisConnectionError("shared state is closing: Redis not asked"))


async def _again(again: Again, reply: Reply) -> None:
    """Call one script on its own (it loads itself first); hand the outcome to its caller."""
    if reply.done():
        return
    try:
        answer = await again()
    except Exception as exc:
        if not reply.done():
            reply.set_exception(exc)
        return
    if not reply.done():
        reply.set_result(answer)
