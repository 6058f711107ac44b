"""What the database refuses for good, told apart from what a retry may fix.

A *permanent* error is one the same row will raise on every attempt: SQLSTATE class 22
(data exception: a NUL byte, an out-of-range number), 23 (integrity violation) or 54
(program limit: a key too long to index), and the client-side equivalents the drivers
raise before the row reaches the server (asyncpg's `DataError`, sqlite3's
`OverflowError` for an integer over 64 bits, `UnicodeEncodeError` for a lone surrogate).
Everything else (a refused connection, a timeout, a serialization failure, a shutdown:
SQLSTATE 08, 40, 53, 57, or no SQLSTATE at all) is transient: the spool keeps the batch
and the writer retries it.

When a batch fails permanently, `apply_salvaging` bisects it: halves are retried, each
in its own transaction, until every refused entry stands alone. Applying is idempotent
(see `gateway.ledger.store`), so a half that committed before a later outage replays as
a no-op.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.ledger import batch, store
from gateway.ledger.records import LedgerEntry

# 22 data exception, 23 integrity constraint violation, 54 program limit exceeded.
PERMANENT_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})
_PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    OverflowError,  # sqlite3: "Python int too large to convert to SQLite INTEGER"
    UnicodeError,  # a lone surrogate cannot be encoded for any driver
    sqlite3.DataError,
    sqlite3.IntegrityError,
    sa_exc.DataError,
    sa_exc.IntegrityError,
)
_MAX_CHAIN = 16
_MAX_REASON = 300


@dataclass(frozen=True, slots=True)
class Refusal:
    """An entry set aside for good, with why; `line` holds a spool line that did not decode."""

    reason: str
    entry: LedgerEntry | None = None
    line: bytes | None = None


@dataclass(slots=True)
class Salvage:
    """What applying a batch did: the stores' result, and the entries refused for good."""

    result: store.BatchResult = field(default_factory=store.BatchResult)
    refused: list[Refusal] = field(default_factory=list)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """Yield `exc`, the driver error it wraps, and their causes, each once."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < _MAX_CHAIN:
        error = todo.pop(0)
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        orig = getattr(error, "orig", None)
        todo.extend([orig if isinstance(orig, BaseException) else None])
        todo.extend([error.__cause__, error.__context__])


def _sqlstate(error: BaseException) -> str | None:
    """The five-character SQLSTATE asyncpg (or its SQLAlchemy adapter) attached, if any."""
    state = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
    return state if isinstance(state, str) and len(state) == 5 else None


def _describe(error: BaseException, state: str | None = None) -> str:
    """One line naming the error, for the rejected file and the log."""
    text = str(error).splitlines()[0] if str(error) else ""
    prefix = f"SQLSTATE {state} " if state else ""
    return f"{prefix}{type(error).__name__}: {text}"[:_MAX_REASON]


def refusal_reason(exc: BaseException) -> str | None:
    """Say why the database will never take what raised `exc`; None when a retry may succeed."""
    errors = list(_chain(exc))
    for error in errors:
        state = _sqlstate(error)
        if state is not None:
            return _describe(error, state) if state[:2] in PERMANENT_SQLSTATE_CLASSES else None
    for error in errors:
        if isinstance(error, _PERMANENT_TYPES):
            return _describe(error)
    return None


async def apply_salvaging(
    engine: AsyncEngine, entries: Sequence[LedgerEntry], step: int = batch.SLICE_ROWS
) -> Salvage:
    """Apply `entries`, setting aside only those the database refuses for good.

    Raises the first transient error; what committed before it replays harmlessly.
    """
    salvage = Salvage()
    await _apply_part(engine, entries, salvage, step)
    return salvage


async def _apply_part(
    engine: AsyncEngine, entries: Sequence[LedgerEntry], into: Salvage, step: int
) -> None:
    """Apply `entries` in one transaction; on a permanent refusal, bisect."""
    if not entries:
        return
    try:
        # Built before the transaction, on the loop a slice at a time (gateway.ledger.batch).
        plan = await batch.plan(engine.dialect, entries, step)
        part = await batch.commit_sqlite(engine, plan)  # a SQLite file: no SQLAlchemy begin
        if part is None:
            async with engine.begin() as connection:
                await batch.pause()  # the pool's check-out and BEGIN: ~0.1 ms of the loop
                part = await batch.apply(connection, plan)
                await batch.pause()  # the last slice has had its time: COMMIT on its own
    except Exception as exc:  # classified below; a transient error is re-raised
        reason = refusal_reason(exc)
        if reason is None:
            raise
        if len(entries) == 1:
            into.refused.append(Refusal(reason, entries[0]))
            return
        middle = len(entries) // 2
        await _apply_part(engine, entries[:middle], into, step)
        await _apply_part(engine, entries[middle:], into, step)
        return
    into.result.inserted += part.inserted
    into.result.duplicates += part.duplicates
    into.result.finished.extend(part.finished)
