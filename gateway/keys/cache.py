"""Every key of the database in a dict by secret hash: a request's key check never waits on I/O.

`lookup` hashes the secret and reads the dict. The dict is rebuilt from the database
every `refresh_s` when the store's fingerprint says something changed (one single-row
query otherwise), at once on this replica when an admin action changes a key (`put`),
and on a miss at most once per `miss_interval_s`: a key made on another replica works
within a second, and a flood of made-up keys costs the database at most one query a
second. While the database is unreachable the last keys read stay in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType

from gateway.keys.model import KeyRecord
from gateway.keys.secrets import hash_secret
from gateway.keys.store import Fingerprint, KeyStore
from gateway.ledger.reads import ledger_down

log = logging.getLogger("farebox.keys")


class KeyCache:
    """The keys of one gateway process; see the module docstring for when it reloads."""

    def __init__(
        self,
        store: KeyStore,
        refresh_s: float,
        *,
        miss_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._refresh_s = refresh_s
        self._miss_interval_s = miss_interval_s
        self._clock = clock
        self._by_hash: dict[str, KeyRecord] = {}
        self._by_id: dict[str, KeyRecord] = {}  # for `line_of`
        self._put_during_load: dict[str, KeyRecord] = {}
        self._fingerprint: Fingerprint | None = None
        self._lock = asyncio.Lock()
        self._last_miss_refresh = float("-inf")
        self._miss_refresh: asyncio.Task[bool] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._down = False
        self.polls = 0  # fingerprint queries, for tests and benches
        self.loads = 0  # full reloads

    def lookup(self, secret: str) -> KeyRecord | None:
        """The record of `secret` whatever its state, or None; never waits.

        A miss starts a background refresh (at most one per `miss_interval_s`), so a key
        made on another replica is found by a later request.
        """
        record = self._by_hash.get(hash_secret(secret))
        if record is None:
            self._refresh_on_miss()
        return record

    async def resolve(self, secret: str) -> KeyRecord | None:
        """`lookup`, but a miss waits for the refresh it may start (new keys work at once)."""
        record = self._by_hash.get(hash_secret(secret))
        if record is not None:
            return record
        task = self._refresh_on_miss()
        if task is not None:
            await asyncio.shield(task)
        return self._by_hash.get(hash_secret(secret))

    def line_of(self, record: KeyRecord) -> str:
        """The id of the first key of `record`'s rotation line (its own id if never rotated).

        A key's budgets and rate limits are counted under this id, so a rotation changes
        the secret and not what the key has spent: a successor does not start a new
        lifetime budget, nor the two keys of an overlap spend a day's budget each.
        """
        for _ in range(len(self._by_id) + 1):  # a cycle is impossible; bound it anyway
            parent = record.rotated_from
            if parent is None:
                return record.id
            found = self._by_id.get(parent)
            if found is None:  # not loaded yet: its id is the line's best name known
                return parent
            record = found
        return record.id

    def put(self, record: KeyRecord) -> None:
        """Make this replica see a change it just committed, without waiting for a poll."""
        self._by_hash[record.secret_hash] = record
        self._by_id[record.id] = record
        self._put_during_load[record.secret_hash] = record

    def __len__(self) -> int:
        return len(self._by_hash)

    async def refresh(self) -> bool:
        """Reload when the database changed; True if it did. An outage keeps the keys."""
        async with self._lock:
            self._put_during_load = {}
            try:
                self.polls += 1
                fingerprint = await self.store.fingerprint()
                if fingerprint == self._fingerprint:
                    self._recovered()
                    return False
                records = await self.store.all()
            except ledger_down() as exc:
                self._failed(exc)
                return False
            self._recovered()
            table = {record.secret_hash: record for record in records}
            table.update(self._put_during_load)  # committed after the read began
            self._by_hash, self._fingerprint = table, fingerprint
            self._by_id = {record.id: record for record in table.values()}
            self.loads += 1
            return True

    async def __aenter__(self) -> KeyCache:
        """Load the keys, then poll every `refresh_s` until exit."""
        await self.refresh()
        self._poller = asyncio.create_task(self._poll())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for task in (self._poller, self._miss_refresh):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self.refresh()

    def _refresh_on_miss(self) -> asyncio.Task[bool] | None:
        """The refresh a miss may wait on: the one running, a new one, or None (too soon)."""
        if self._miss_refresh is not None and not self._miss_refresh.done():
            return self._miss_refresh
        now = self._clock()
        if now - self._last_miss_refresh < self._miss_interval_s:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the event loop: nothing to refresh on
            return None
        self._last_miss_refresh = now
        self._miss_refresh = loop.create_task(self.refresh())
        return self._miss_refresh

    def _failed(self, exc: BaseException) -> None:
        if not self._down:
            log.warning(
                "virtual keys: the database is unreachable (%s: %s); serving the %d keys "
                "last read until it answers",
                type(exc).__name__, exc, len(self._by_hash),
            )  # fmt: skip
        self._down = True

    def _recovered(self) -> None:
        if self._down:
            log.warning("virtual keys: the database answers again; refreshing")
        self._down = False
