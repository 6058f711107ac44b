"""Keep the start-up heap out of the garbage collector's full passes.

After start-up the process holds ~130,000 objects the collector tracks (~460,000 once
litellm is loaded): modules, classes, price maps, all alive as long as the process. A
full collection walks every one of them, 35 ms (100-200 ms with litellm) on the event
loop of whichever request allocated the object that triggered it. `gc.freeze()` moves
them into a generation collections skip; dropped objects are still freed by reference
counting, so only cycles among frozen objects would outlive their use, and the
collection just before freezing clears the start-up garbage first.

The serving process also runs young collections less often (`YOUNG_THRESHOLD`): with
CPython's default of 700, the objects of the requests in flight set one off every 70-125
requests at concurrency 1 and every ~13 at 64, each walking those objects (0.18-0.31 ms
of CPU here) and promoting them to older generations whose passes cost 1-1.5 ms (and
6-7.5 ms for a full one): ~3-6 µs per request at concurrency 1, 24-36 µs at 64, and a
pause on the path of 1 request in 70-125 at concurrency 1, where the p99 is measured.
A small request leaves no cyclic garbage (the collections found none to free), so a
later young collection frees no later than it needs to.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("farebox.heap")

YOUNG_THRESHOLD = 20_000
"""Net new tracked objects between two young collections in the serving process (CPython:
700). bench/c1_path.py --gc at 20,000: one per ~3,000 requests at concurrency 1 (~2.5 ms of
CPU each) and one per 4,000-8,000 at 64, no older-generation pass in either run."""


def freeze_imports() -> None:
    """Freeze what importing the gateway made, before start-up adds to it; no collection.

    `farebox serve` calls this once its imports are done, so `freeze_heap`'s collection in
    the lifespan walks only what start-up made since (~10,000-25,000 objects, not ~180,000):
    88 -> 5-7 ms of CPU before the port opens, its count included (`_collectable_count`).
    Nothing is collected first because importing leaves no garbage to speak of (a full
    collection just after `import gateway.app, gateway.cli` frees 0 objects), and a
    collection here would cost what it saves.

    It also sets the serving process's young-generation threshold to `YOUNG_THRESHOLD`
    (the older generations' stay CPython's); worker processes forked from it keep it.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def freeze_heap() -> int:
    """Collect once, then freeze what is left; return how many objects this call froze."""
    started, cpu = time.perf_counter(), time.thread_time()
    freed = gc.collect()
    frozen = _collectable_count()
    gc.freeze()
    log.info(
        "froze %d more long-lived objects out of garbage collection in %.0f ms "
        "(%.0f ms of CPU, %d unreachable freed)",
        frozen,
        (time.perf_counter() - started) * 1000,
        (time.thread_time() - cpu) * 1000,
        freed,
    )
    return frozen


def _collectable_count() -> int:
    """How many objects the collector tracks outside the frozen ones (what `freeze` moves).

    Not `gc.get_freeze_count()` after freezing: that walks every object frozen so far, one
    cache miss each, 16 ms of CPU before the port opens for start-up's ~140,000 (~460,000
    once litellm is loaded, on the loop of a serving gateway). After `freeze_imports` the
    collector's own generations hold only what start-up has made since (~13,000 objects).
    """
    return sum(len(gc.get_objects(generation)) for generation in range(3))
