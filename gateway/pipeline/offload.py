"""Run a request's CPU-heavy step beside the event loop when its body is large.

A step that parses, validates, fingerprints or scans a body of megabytes holds the loop
for as long as it computes, and every other request and stream of the process waits. Above
`OFF_LOOP_BYTES` such a step runs in a worker thread: Python code there gives the loop the
interpreter back every few milliseconds (`sys.getswitchinterval()`), and the native prefix
locator releases it outright. Small requests, the common case, stay on the loop: a thread
hop costs ~50-100 µs, more than their whole step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from gateway.prefix.locate import take_items
from gateway.rawjson import SKIPS, depth_and_commas, value_commas

OFF_LOOP_BYTES = 256 * 1024
PATCH_SPEEDUP = 32
"""A trusted patch (values skipped natively, the copy without the GIL) costs about this
much less per byte than parsing: 1 MiB is ~0.05 ms of skip plus a ~0.1 ms copy."""
# Messages freed per step: ~1,000 small dicts take well under a millisecond to free.
FREE_SLICE = 1024
INLINE_BYTES = 5 * 1024 * 1024 // 4
INLINE_VALUES = 8192
"""A body up to `INLINE_BYTES` with at most `INLINE_VALUES` commas outside strings (they
bound the members and elements the depth check and pydantic walk) is parsed whole on the
loop: ~2 ms for a 1 MB agent step here (4,555 commas), less than slicing it (~2.8 ms: the
native walks go over the messages twice) and than the hops to a worker thread and back.
A body of many small values (2 MiB of numbers: ~160 ms) is still sliced."""
RELEASE_BYTES = 2 * 1024 * 1024
"""Below this, what a body was parsed into is freed where its last reference drops: for
1 MB (445 messages, their models and prefix segments) that took 0.1 ms on the loop here,
less than the hop to a worker thread and the walk that takes it apart; 4 MB took 1.2 ms."""

SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the interpreter lock runs on once another asks for it (Python's
default is 5 ms). The loop asks for it a few times per wake-up (each `select` lets go of
it), so behind a worker thread computing in Python it waited up to 5 ms each time: 12-15 ms
of lag per wake-up behind a 466,000-message prefix check, 9-10 ms at 1 ms. A switch happens
only when two threads want the lock, so requests that never leave the loop pay nothing."""

P = ParamSpec("P")
T = TypeVar("T")


def share_the_lock() -> None:
    """Make a worker thread hand the interpreter lock to the loop within `SWITCH_INTERVAL_S`.

    Process-wide: call it once, where the serving process starts (the app's lifespan).
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


async def sized(size: int, step: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `step` on the loop for inputs up to `OFF_LOOP_BYTES`, in a worker thread above.

    A caller on the request path may test `on_loop(size)` and call `step` itself: no
    coroutine for the usual small input."""
    if size <= OFF_LOOP_BYTES:
        return step(*args, **kwargs)
    return await asyncio.to_thread(step, *args, **kwargs)


def on_loop(size: int) -> bool:
    """Whether `sized(size, ...)` runs its step on the loop."""
    return size <= OFF_LOOP_BYTES


def patch_size(size: int) -> int:
    """What patching a parsed body of `size` bytes weighs for `sized`: a thread hop costs
    more than patching megabytes when values are skipped natively."""
    return size // PATCH_SPEEDUP if SKIPS else size


def parses_inline(raw: bytes) -> bool:
    """Whether parsing `raw` whole costs only a few milliseconds (see `INLINE_VALUES`).

    Commas outside strings: those in a string add no value to walk.
    """
    return len(raw) <= INLINE_BYTES and value_commas(raw) <= INLINE_VALUES


def inline_bound(raw: bytes) -> tuple[bool, int | None]:
    """`parses_inline(raw)`, and `raw`'s bracket depth when the same pass found it (for
    `load_object`, which would count it again: ~0.1 ms per MB)."""
    if len(raw) > INLINE_BYTES:
        return False, None
    depth, commas = depth_and_commas(raw)
    return commas <= INLINE_VALUES, depth


async def release(size: int, *containers: Any) -> None:
    """Free a large body's message lists, and what else lists hold, beside the loop.

    Freeing hundreds of thousands of parsed messages is one long cascade of deallocations
    (~150 ms for 466,000), and it happens wherever the last reference drops: on the loop,
    when the request ends. Emptied here in slices, each step is short and the worker
    thread gives the interpreter back between them. An object in a list that holds big
    sequences of its own (the prefix check's one segment per message: ~80 ms to free for
    466,000) has their items moved into the list first, so they too go a slice at a
    time. Call it only once nothing reads the contents any more, and hand over the last
    reference: a list that is the only holder of the object.
    """
    lists = [item for item in containers if isinstance(item, list)]
    if size > RELEASE_BYTES and lists:
        await asyncio.to_thread(_empty, lists)


def _empty(lists: list[list[Any]]) -> None:
    for items in lists:
        if any(type(item) not in _PLAIN for item in items):
            _take_apart(items)
        _free(items)


def _free(items: list[Any]) -> None:
    while items:
        del items[-FREE_SLICE:]


def _take_apart(items: list[Any]) -> None:
    """Free each object in `items` with its big sequences emptied first, a slice at a time.

    A big sequence an object holds as an attribute is detached and its items moved out,
    no count touched (`take_items`); one held elsewhere too, or in a container, has its
    items copied into `items` instead (one pass over them, lock held). The object goes
    next, while what it held stays alive: freeing it then only drops references.
    """
    moved: list[list[Any]] = []
    parts: list[Any] = []
    for item in items:
        if type(item) not in _PLAIN:
            _gather(item, moved, parts)
    items[:] = [item for item in items if type(item) in _PLAIN]
    items += parts
    del parts
    for part in moved:
        _free(part)


# What a message is made of: nothing in these holds a big sequence worth taking apart.
_PLAIN = frozenset({dict, str, bytes, int, float, bool, type(None)})
# How far into an object to look for big sequences (outcome -> check -> segments).
_PARTS_DEPTH = 4


def _gather(root: Any, moved: list[list[Any]], parts: list[Any]) -> None:
    """Move the items of each sequence over `FREE_SLICE` items `root` holds, a few levels in.

    Into `moved` (one list per sequence, detached from its holder: an attribute or a list
    slot), else (in a dict or a tuple) copied into `parts`. Only dataclass instances,
    dicts, lists and tuples are looked into: never classes, modules or functions, whose
    references reach the whole program.
    """
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        detachable = type(node) is list or not isinstance(node, dict | list | tuple)
        for key, child in _children(node):
            if not (isinstance(child, list | tuple) and len(child) > FREE_SLICE):
                if depth < _PARTS_DEPTH and _looked_into(child):
                    stack.append((child, depth + 1))
            elif not detachable:
                parts.extend(child)
            else:
                del child  # a reference here would keep `take_items` from moving its items
                taken = take_items(node, key)
                if taken is not None:  # else another holder frees it, or no native module
                    moved.append(taken)


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    """Each child of `node` with its key (attribute name or index), one at a time."""
    if isinstance(node, dict):
        yield from node.items()
    elif isinstance(node, list | tuple):
        for index in range(len(node)):
            yield index, node[index]
    elif dataclasses.is_dataclass(node):
        for field in dataclasses.fields(node):
            yield field.name, getattr(node, field.name, None)


def _looked_into(value: Any) -> bool:
    if isinstance(value, dict | list | tuple):
        return True
    return dataclasses.is_dataclass(value) and not isinstance(value, type)
