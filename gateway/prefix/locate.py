"""Where the volatile-content pattern matches: native locator first, Python's regex to confirm.

`matches` yields what `CANDIDATES.finditer(data, start, limit)` yields for matches that
start before `stop`, less bare numbers that `classify` would reject anyway (see
`_locate.c`), so the hits are the same. With the native `_locate` module (built from
`_locate.c` at install time) Python's regex is tried only where a match is possible, which
takes a first-seen megabyte from 10-50 ms to about 1 ms; without it, the regex runs
everywhere.
`FAREBOX_PREFIX_NATIVE=0` turns the native locator off (to compare the two).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from gateway.prefix.patterns import CANDIDATES

NextCandidate = Callable[[bytes, int, int, int], int]

FlagCandidates = Callable[[Sequence[bytes]], list[int]]


UntrackTuples = Callable[[list[Any], object, int], int]


def _load() -> tuple[NextCandidate | None, FlagCandidates | None, UntrackTuples | None]:
    if os.environ.get("FAREBOX_PREFIX_NATIVE", "1") == "0":
        return None, None, None
    try:
        from gateway.prefix import _locate  # type: ignore[attr-defined]
    except ImportError:  # built without a C compiler: the pure-Python scan, same results
        return None, None, None
    return _locate.next_candidate, _locate.flag_candidates, _locate.untrack_tuples


_native, _flag, _untrack = _load()
_untrack_flat: Callable[[Any], bool] | None = None
_untracked_tuple: Callable[..., tuple[Any, ...]] | None = None
if _untrack is not None:
    from gateway.prefix import _locate  # type: ignore[attr-defined]

    _untrack_flat, _untracked_tuple = _locate.untrack_flat, _locate.untracked_tuple
    # None from a module built before they were added: the copying fallbacks below.
    _moved_tuple: Callable[..., tuple[Any, ...]] | None = getattr(_locate, "moved_tuple", None)
    _take_items: Callable[[Any, Any], list[Any] | None] | None = getattr(
        _locate, "take_items", None
    )
else:
    _moved_tuple = _take_items = None

NATIVE: bool = _native is not None


def _bind_xxh3() -> bool:
    """Let `_locate` hash with xxhash's C function where it is handed `xxh3_128_digest`.

    The installed `xxhash` extension exports XXH3_128bits; `_locate.bind_xxh3` looks it up
    in the loaded module and keeps it only if its digests equal the Python function's.
    False (the Python function is called, same results) without it.
    """
    bind = getattr(_locate, "bind_xxh3", None) if _untrack is not None else None
    if bind is None:
        return False
    import xxhash
    from xxhash import _xxhash  # type: ignore[attr-defined]

    path = getattr(_xxhash, "__file__", None)
    hasher = xxhash.xxh3_128_digest
    return isinstance(path, str) and hasher is _xxhash.xxh3_128_digest and bool(bind(hasher, path))


XXH3_NATIVE: bool = _bind_xxh3()


def native_step(name: str) -> Callable[..., Any] | None:
    """The `_locate` function `name` of the segment cut or the fingerprint chain, or None
    when the module is not built, was built before it was added, or is turned off
    (`FAREBOX_PREFIX_NATIVE=0`): the callers then run their Python loops, same results."""
    if _untrack is None:
        return None
    from gateway.prefix import _locate  # type: ignore[attr-defined]

    found: Callable[..., Any] | None = getattr(_locate, name, None)
    return found


def flag_candidates(buffers: Sequence[bytes]) -> list[int]:
    """The indices of the buffers in which the pattern may match (all, without the locator)."""
    return list(range(len(buffers))) if _flag is None else _flag(buffers)


def matches(
    data: bytes, start: int, stop: int, limit: int, *, native: bool = True
) -> Iterator[re.Match[bytes]]:
    """Yield the pattern's matches in data[:limit] that start in [start, stop).

    `native=False` runs Python's regex everywhere, as when the locator is not built.
    """
    locator = _native if native else None
    if locator is None:
        yield from _regex_matches(data, start, stop, limit)
        return
    attempt = CANDIDATES.match
    pos = start
    while True:
        candidate = locator(data, pos, stop, limit)
        if candidate < 0:
            return
        found = attempt(data, candidate, limit)
        if found is None:
            pos = candidate + 1
            continue
        yield found
        pos = found.end()


def attempts(
    data: bytes, start: int, stop: int, limit: int, *, native: bool = True
) -> Iterator[re.Match[bytes] | None]:
    """Like `matches`, plus a None for each candidate the regex tried and rejected.

    A rejected candidate costs about what a match does (~3 µs): the scan budget counts both.
    A separate loop from `matches`, which unbudgeted scans (lint) keep at full speed.
    """
    locator = _native if native else None
    if locator is None:
        yield from _regex_matches(data, start, stop, limit)
        return
    attempt = CANDIDATES.match
    pos = start
    while True:
        candidate = locator(data, pos, stop, limit)
        if candidate < 0:
            return
        found = attempt(data, candidate, limit)
        yield found
        pos = candidate + 1 if found is None else found.end()


def _regex_matches(data: bytes, start: int, stop: int, limit: int) -> Iterator[re.Match[bytes]]:
    for match in CANDIDATES.finditer(data, start, limit):
        if match.start() >= stop:
            return
        yield match


def untrack_tuples(items: list[Any], shared: object, start: int = 0) -> int:
    """Take the tuples of `items[start:]` made only of atoms (and `shared`) out of cyclic GC.

    Segments are NamedTuples, which CPython never untracks by itself: with hundreds of
    thousands alive, each full collection walked them all with the interpreter lock held
    (see `_locate.c`). Without the native module this does nothing and returns 0.
    """
    return 0 if _untrack is None else _untrack(items, shared, start)


Flat = TypeVar("Flat", list[Any], tuple[Any, ...])
T = TypeVar("T")


def untracked(container: Flat) -> Flat:
    """`container`, out of cyclic GC when all its items are (see `_locate.c`, `untrack_flat`).

    For the big lists the prefix check makes of a long conversation and fills with
    untracked items only (segments, their bytes), best untracked while still empty: one
    check of every item costs ~10 ms for 466,000 of them. While tracked and young, such a
    list is walked item by item by every collection meanwhile, lock held. Without the
    native module it is returned as is.
    """
    if _untrack_flat is not None:
        _untrack_flat(container)
    return container


def untracked_tuple(
    items: list[T] | tuple[T, ...], start: int = 0, stop: int | None = None
) -> tuple[T, ...]:
    """`tuple(items[start:stop])`, out of cyclic GC when all its items are, in one pass.

    The native pass offers the interpreter lock to other threads (the event loop) every
    32,768 items: one pass over 466,000 held it 15 ms.

    CPython would untrack such a tuple itself, but only inside the first collection after
    it is made, walking it twice, on whichever thread (the event loop's) allocates then.
    """
    end = len(items) if stop is None else stop
    if _untracked_tuple is None:
        return tuple(items[start:end])
    return _untracked_tuple(items, start, end)


def moved_tuple(items: list[T], acyclic: bool = False) -> tuple[T, ...]:
    """A tuple of `items`, which is left empty: the references move, no item is touched.

    `tuple(items)` and then freeing `items` is two passes over the items, each a cache
    miss per item with the lock held (10-20 ms apiece for 466,000 on the dev box); moving
    is a copy of the pointers. The tuple is out of cyclic GC when `acyclic` (the caller
    knows nothing in it leads back to it: strings, bytes, ints, untracked segments) or
    when all its items are untracked. Only for a list nobody else holds.
    """
    if _moved_tuple is None:
        moved = tuple(items)
        items.clear()
        return moved
    return _moved_tuple(items, acyclic)


def take_items(owner: Any, key: str | int) -> list[Any] | None:
    """The items of `owner.key` (or `owner[key]` for a list), moved into a new list, or None.

    The sequence is detached from `owner` first (the attribute set to `()`, the list slot
    to None), even on a frozen dataclass: call it only on objects nothing reads any more.
    When that left no other holder, its items move to the list returned (untouched, no
    count changed), for the caller to free a slice at a time; the emptied sequence is
    freed at once. None when someone else still holds the sequence. Without the native
    module nothing is detached: the list returned is a copy (its items die with it, a
    slice at a time, once the owner is gone).
    """
    if _take_items is None:
        value = owner[int(key)] if type(owner) is list else getattr(owner, str(key))
        return list(value) if isinstance(value, list | tuple) else None
    return _take_items(owner, key)


def acyclic_list() -> list[Any]:
    """An empty list out of cyclic GC, for a large list nothing it will hold refers back to.

    Values parsed from JSON form a tree, and a function's own scratch list (one entry per
    segment) is seen by nobody else: neither is in a reference cycle, even when it holds
    tracked dicts, lists or tuples. Tracked, the 466,000 messages of one request (and
    their validated copy, and each per-segment list of the prefix scan) were walked item
    by item by the collections meanwhile, 20-90 ms each, on whichever thread (the event
    loop's) allocated then. A cycle someone later made through it would be kept, not
    freed: only for lists nobody links back to.
    """
    return untracked([])
