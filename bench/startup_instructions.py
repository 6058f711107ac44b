"""Instructions `farebox serve` spends on its imports, `create_app` and the warm-up's route
pass, counted by callgrind for each tree given (steadier than any clock on a shared box).

Run: `python bench/startup_instructions.py --src /work/wt-base --src .` (each tree a
checkout with its compiled extensions and bytecode). It imports as `serve` does: gateway.cli
with `serve` as the command, fastapi (inside `serve_imports.deferred_model_builds` where the
tree has it), gateway.app, gateway.server, gateway.preflight, gateway.drain,
gateway.workers; freezes them (and resumes the collector where the tree pauses it) as
`serve` does; then `create_app` (with `defer_routes=True, migrated=True` where the tree
takes them) on the embedded default configuration and a SQLite ledger in a scratch folder,
and routes one unserved path through the app's router as the warm-up does. Nothing listens;
the lifespan does not run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def child(data_dir: str) -> None:
    import asyncio
    import contextlib
    import inspect

    sys.argv = ["farebox", "serve"]
    import gateway.cli
    from gateway import serve_imports

    defer = getattr(serve_imports, "deferred_model_builds", None)
    with defer() if defer is not None else contextlib.nullcontext():
        import fastapi  # noqa: F401
    import gateway.drain
    import gateway.preflight
    import gateway.server
    import gateway.workers  # noqa: F401
    from gateway.app import create_app
    from gateway.heap import freeze_imports

    freeze_imports()  # as serve does next; then the collector runs again where paused
    getattr(serve_imports, "resume_collection", lambda: None)()
    from gateway.config import load_config
    from gateway.settings import Settings
    from gateway.warmup import route_unrouted

    settings = Settings(data_dir=Path(data_dir))
    parameters = inspect.signature(create_app).parameters
    options: dict[str, Any] = {n: True for n in ("defer_routes", "migrated") if n in parameters}
    app = create_app(settings, load_config(settings.config_path()), **options)
    asyncio.run(route_unrouted(app.router))


def count(tree: Path) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/cg.out",
                sys.executable,
                __file__,
                "--child",
                scratch,
            ],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", action="append", default=[], help="a tree (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    for tree in args.src or ["."]:
        print(f"{tree}: {count(Path(tree).resolve()) / 1e6:,.0f} M instructions")


if __name__ == "__main__":
    main()
