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

`sqlalchemy.ext.asyncio`'s `__init__` imports its session module, and with it SQLAlchemy's
ORM (41 modules, ~73 ms of CPU), which a serving gateway never uses (the ledger reads and
writes through Core: `AsyncEngine`, `AsyncConnection`). For `serve` the package is made
without its `__init__` at first (`_SessionsOnFirstUse`): its engine names come from
`.engine`; the first other name (`AsyncSession`, ...) runs the real `__init__` in the same
module, after which it is the package an ordinary import makes (tests/unit/
test_serve_async_sessions.py). The ORM stays out only while nothing imported asks for a
session's name at import (gateway/ledger/queries.py and ranked.py name `AsyncSession` for
type checks only).

Only for `farebox serve`: any other command line, and an importing test, gets all of them as
they are.

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
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

_paused = sys.argv[1:2] == ["serve"] and gc.isenabled()
if sys.argv[1:2] == ["serve"]:
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    sys.modules.setdefault("pydantic.v1", None)  # type: ignore[arg-type]
if _paused:
    gc.disable()  # until resume_collection, once serve's imports are frozen

_ENGINE_NAMES = frozenset(
    (
        "AsyncConnection",
        "AsyncEngine",
        "AsyncTransaction",
        "async_engine_from_config",
        "create_async_engine",
        "create_async_pool_from_url",
    )
)
"""What `sqlalchemy.ext.asyncio` re-exports from its `engine` module (every other name, its
sessions' among them, runs the package's own `__init__`)."""


class _SessionsOnFirstUse(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`sqlalchemy.ext.asyncio` without its sessions until a name needs them.

    The package's `__init__` re-exports its engine, result and session modules' names; the
    session module imports SQLAlchemy's ORM (41 modules, ~73 ms of CPU), which a serving
    gateway never uses (it reads and writes through Core). For `farebox serve` the package
    is made without running `__init__` at first: its engine names come from `.engine`, and
    any other name (`AsyncSession`, `AsyncResult`, ...) runs the real `__init__` in the same
    module object, after which the package is exactly what it always was.
    """

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "sqlalchemy.ext.asyncio":
            return None
        sys.meta_path.remove(self)  # once: the real finder from here on
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not spec.submodule_search_locations:
            return spec
        self._real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        from sqlalchemy.util import concurrency

        concurrency._concurrency_shim._initialize()  # the one thing `__init__` does besides
        real = self._real

        def attribute(name: str) -> Any:
            if name in _ENGINE_NAMES:
                return getattr(importlib.import_module(f"{module.__name__}.engine"), name)
            if name.startswith("__") or importlib.util.find_spec(f"{module.__name__}.{name}"):
                raise AttributeError(name)  # a submodule (`from . import exc`): imported as one
            del module.__getattr__
            module.__spec__.loader = real  # type: ignore[union-attr]
            module.__loader__ = real
            real.exec_module(module)
            return getattr(module, name)

        setattr(module, "__getattr__", attribute)  # noqa: B010 (a module's, PEP 562)


if sys.argv[1:2] == ["serve"] and "sqlalchemy.ext.asyncio" not in sys.modules:
    sys.meta_path.insert(0, _SessionsOnFirstUse())


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
