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
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

OFF_LOOP_BYTES = 256 * 1024
# Messages freed per step: ~1,000 small dicts take well under a millisecond to free.
FREE_SLICE = 1024

P = ParamSpec("P")
T = TypeVar("T")


async def sized(size: int, step: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run `step` on the loop for inputs up to `OFF_LOOP_BYTES`, in a worker thread above."""
    if size <= OFF_LOOP_BYTES:
        return step(*args, **kwargs)
    return await asyncio.to_thread(step, *args, **kwargs)


async def release(size: int, *containers: Any) -> None:
    """Free a large body's message lists beside the loop, a slice at a time.

    Freeing hundreds of thousands of parsed messages is one long cascade of deallocations
    (~150 ms for 466,000), and it happens wherever the last reference drops: on the loop,
    when the request ends. Emptied here in slices, each step is short and the worker
    thread gives the interpreter back between them. Call it only once nothing reads the
    messages any more.
    """
    lists = [item for item in containers if isinstance(item, list)]
    if size > OFF_LOOP_BYTES and lists:
        await asyncio.to_thread(_empty, lists)


def _empty(lists: list[list[Any]]) -> None:
    for items in lists:
        while items:
            del items[-FREE_SLICE:]
