"""gateway.heap.freeze_heap counts what it froze without walking what was frozen before."""

from __future__ import annotations

import gc

from gateway.heap import freeze_heap, freeze_imports


def test_freeze_heap_returns_what_this_call_froze() -> None:
    """`farebox serve` freezes its imports first (~130,000 objects); the lifespan's freeze
    then moves and reports only what start-up made since (gc.get_freeze_count() walked all
    of them: 16 ms of CPU before the port opened)."""
    gc.unfreeze()
    try:
        freeze_imports()  # everything this test process holds so far
        earlier = gc.get_freeze_count()
        kept = [[n] for n in range(1_000)]  # tracked containers, alive
        froze = freeze_heap()
        assert len(kept) <= froze < earlier
        walked = {id(item) for item in gc.get_objects()}  # what a collection would visit
        assert not any(id(item) in walked for item in kept)
        assert freeze_heap() < len(kept)  # nothing new to speak of: the count is not a total
    finally:
        gc.freeze()  # as the worker's collection left it (tests/conftest.py)
