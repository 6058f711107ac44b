"""What `farebox serve` keeps out of the serving process; imported first by gateway.cli.

httpx imports its command-line module (`httpx._main`: click's rich help, rich, pygments)
whenever those are installed, as they are beside typer: 1.5 MiB of RSS and ~15 ms of CPU
in every gateway process (measured: the app's imports 104.8 -> 103.3 MiB), for
`httpx.main`, which the gateway never calls. Marking the module absent before the first
`import httpx` leaves httpx its fallback `main` (it says to install `httpx[cli]`).

FastAPI asks of every route's fields whether they are pydantic v1 models, and to ask it
imports `pydantic.v1` (23 modules, 15-25 ms of CPU before the port opens; the serve
imports' instructions 4,836 -> 4,750 M under callgrind) though no gateway model is one.
Marked absent, the import fails and FastAPI takes its own "no pydantic.v1" branch (written
for a pydantic without v1): every answer is "not a v1 model", the one the gateway's models
give anyway (tests/e2e/test_startup_imports.py: the same OpenAPI schema). The one other
importer: pydantic, to word its warning about a type with only v1's `__get_validators__`
hook, which would fail in `serve` instead (none installed here: FastAPI's fallback
`EmailStr` has the v2 hook too).

Only for `farebox serve`: any other command line, and an importing test, gets both as they
are.

`deferred_model_builds` is for FastAPI's own import, which `serve` wraps in it: importing
`fastapi` built the pydantic models of the OpenAPI document (`fastapi.openapi.models`,
imported by `fastapi.params`) before the port opened, ~180 M of its ~550 M instructions
(callgrind), though only /openapi.json uses them. Built on first use instead (pydantic's
`defer_build`, inherited from `BaseModel.model_config` while the block runs), the first
/openapi.json pays it (~10 ms); the schema is the same (tests/e2e/test_startup_imports.py).

The garbage collector is paused from here (gateway.cli imports this module first) until
`serve` has made its imports and frozen them (`resume_collection`): importing leaves no
garbage to speak of (a full collection after it frees nothing; the ~280 collections that
ran during it freed ~2,100 objects in all), but each of them walked the young objects, and
the two full ones every object imported so far: 150-190 ms of the imports' 1.1-1.3 s of
CPU (gc.callbacks, 3 runs), all before the first request. The price: what they would have
freed (2,150 unreachable objects, 588 KiB of them shallow: dead temporary classes,
functions, cells) is frozen with the imports and kept, ~0.6 MiB per process; a collection
before the freeze to free it would walk all ~120,000 objects again (a full one: ~35 ms).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_paused = sys.argv[1:2] == ["serve"] and gc.isenabled()
if sys.argv[1:2] == ["serve"]:
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    sys.modules.setdefault("pydantic.v1", None)  # type: ignore[arg-type]
if _paused:
    gc.disable()  # until resume_collection, once serve's imports are frozen


def resume_collection() -> None:
    """Let the collector run again if this module paused it (`serve`, after its imports)."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


@contextmanager
def deferred_model_builds() -> Iterator[None]:
    """pydantic models defined in the block build their validators on first use."""
    from pydantic import BaseModel

    config = BaseModel.model_config
    BaseModel.model_config = {**config, "defer_build": True}
    try:
        yield
    finally:
        BaseModel.model_config = config
