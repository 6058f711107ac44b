"""`--src CHECKOUT` for the in-process benches: import `gateway` from another tree."""

from __future__ import annotations

import sys


def use_checkout(src: str | None) -> None:
    """Import `gateway` from `src` (not the editable install) when given, before its import."""
    if src is None:
        return
    sys.meta_path[:] = [
        finder
        for finder in sys.meta_path
        if "editable" not in getattr(finder, "__module__", "")
        and "editable" not in getattr(finder, "__name__", "")
    ]
    sys.path.insert(0, src)
