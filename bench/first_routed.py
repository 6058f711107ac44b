"""CPU that the first request FastAPI routes pays for the deferred routers, per tree.

Run: `python bench/first_routed.py --src /work/base --src . [--apps 4]` (each tree a
checkout with its compiled extensions). For each tree a child process builds `--apps`
apps as `farebox serve` does (`defer_routes=True`, the embedded default configuration, a
SQLite ledger in a scratch folder) and, for each, times the deferred routers' inclusion
and the first routing through the app's router (`gateway.api.routers.IncludeDeferred`'s
work, then the warm-up's walk): the first app pays the routers' imports, the later ones
what an app built again in the same process pays (a reload; the tests' servers).
Nothing listens; the lifespan does not run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(apps: int) -> None:
    import logging

    logging.disable(logging.WARNING)
    from gateway.api.routers import IncludeDeferred
    from gateway.app import create_app
    from gateway.config import load_config
    from gateway.settings import Settings
    from gateway.warmup import route_unrouted

    spent = []
    for _ in range(apps):
        settings = Settings(data_dir=Path(tempfile.mkdtemp()))
        app = create_app(settings, load_config(settings.config_path()), defer_routes=True)
        (routers,) = (m.kwargs["routers"] for m in app.user_middleware if m.cls is IncludeDeferred)
        started = time.process_time()
        routers.include_deferred()
        asyncio.run(route_unrouted(app.router))
        spent.append(time.process_time() - started)
    print(" ".join(f"{s * 1000:.1f}" for s in spent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", action="append", default=[], help="a tree (repeatable)")
    parser.add_argument("--apps", type=int, default=4, help="apps built in each process")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    for tree in args.src or ["."]:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(args.apps)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"{tree}: deferred routers' inclusion and first routing, ms of CPU per app:")
        print(f"  {done.stdout.strip()}")


if __name__ == "__main__":
    main()
