"""gateway.heap: the import-time freeze, then the lifespan's."""

from __future__ import annotations

import gc

from gateway.heap import freeze_heap, freeze_imports


def test_the_import_freeze_leaves_new_objects_to_the_collector() -> None:
    gc.unfreeze()
    try:
        before = [[n] for n in range(100)]
        freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen >= len(before)
        walked = {id(item) for item in gc.get_objects()}
        assert not any(id(item) in walked for item in before)
        after = [[n] for n in range(100)]
        assert all(id(item) in {id(o) for o in gc.get_objects()} for item in after[:3])
        assert freeze_heap() >= frozen + len(after)  # the lifespan's freeze adds the rest
    finally:
        gc.unfreeze()
