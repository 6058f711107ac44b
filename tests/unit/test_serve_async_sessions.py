"""`farebox serve` imports `sqlalchemy.ext.asyncio` without its sessions until a name needs
them (gateway/serve_imports.py): the engine's names come without SQLAlchemy's ORM, and the
first other name makes the package exactly what its own `__init__` makes."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
sys.argv = ["farebox", *sys.argv[1:]]
import gateway.serve_imports
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.ext.asyncio import exc  # a submodule, imported as one
from sqlalchemy.util import concurrency
engine_only = "sqlalchemy.orm" not in sys.modules
shim = "greenlet" in vars(concurrency)  # what the package's __init__ also sets up
import sqlalchemy.ext.asyncio as package
from sqlalchemy.ext.asyncio import AsyncSession
names = sorted(n for n in vars(package) if not n.startswith("_"))
print(json.dumps([
    engine_only, shim, AsyncEngine.__module__, AsyncSession.__module__,
    "sqlalchemy.orm" in sys.modules, names, type(package.__loader__).__name__,
    "__getattr__" in vars(package),
]))
"""


def _probe(*argv: str) -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(done.stdout))


def test_serve_gets_the_engine_without_the_orm_then_the_whole_package() -> None:
    served, other = _probe("serve"), _probe("report")
    engine_only, shim, engine_module, session_module, orm, names, loader, lazy = served
    assert engine_only is True and shim is True
    assert engine_module == "sqlalchemy.ext.asyncio.engine"
    assert session_module == "sqlalchemy.ext.asyncio.session" and orm is True
    assert loader == "SourceFileLoader" and lazy is False  # the real package from here on
    assert names == other[5]  # the same public names as an ordinary import gives
    assert other[0] is False  # any other command line imports the package as it is
