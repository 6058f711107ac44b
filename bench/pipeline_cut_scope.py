"""What the shutdown's cut costs a request: an anyio cancel scope per request, or a tracked task.

Run: `python bench/pipeline_cut_scope.py [--tasks 2000] [--rounds 20] [--callgrind]`.

Runs, on uvloop, a task per request as uvicorn does and times four variants of what the
chat front put around it: `old_whole` (bf9fc84's front: an anyio `CancelScope` entered for
the request, which makes anyio's state for the task) and `new_whole`
(`gateway.drain.TrackedRequest`, given its task as the server gives it), each around one
await; `old_stream` and `new_stream` the same around a reply that awaits and then settles
under a shield, as the relay does (`old_stream`: an anyio shield, as bf9fc84's relay
did; `new_stream`: `gateway.drain.Shield`, as the relay does since the streams' seventh
pass, with no scope per stream). Prints the best and median of `--rounds` rounds, µs of
process CPU per task, interleaved. `--callgrind` reruns this script under
`valgrind --tool=callgrind` and prints the instructions per task of each variant instead
(counters zeroed before and dumped after each variant's `--tasks`, twice): steady on a
loaded box where the times are not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop
from anyio._backends._asyncio import CancelScope  # the class anyio.CancelScope() resolves to
from starlette.responses import Response

from gateway.drain import InFlight, Shield, TrackedRequest

IN_FLIGHT = InFlight()
SCOPES = IN_FLIGHT._scopes
TASK: list[Any] = [None]  # the task about to run: what the server keeps in its scope
NONE: Any = None  # the reply's scope, receive and send: not read


async def _settle() -> None:
    await asyncio.sleep(0)
    with CancelScope(shield=True):  # the relay books under an anyio shield
        pass


async def _settle_tracked() -> None:
    await asyncio.sleep(0)
    with Shield():  # the relay books under the tracked request's shield
        pass


class _Reply(Response):
    def __init__(self, settle: Callable[[], Coroutine[Any, Any, None]] = _settle) -> None:
        self.settle = settle  # no headers or body: only the awaits matter here

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.settle()


async def old_whole() -> None:
    cut = CancelScope()
    with cut:
        SCOPES.add(cut)
        try:
            await asyncio.sleep(0)
        finally:
            SCOPES.discard(cut)


async def new_whole() -> None:
    cut = TrackedRequest(IN_FLIGHT, TASK[0])
    try:
        await asyncio.sleep(0)
    finally:
        cut.leave()


async def old_stream() -> None:
    cut = CancelScope()
    with cut:
        SCOPES.add(cut)
        try:
            await _Reply()(NONE, NONE, NONE)
        finally:
            SCOPES.discard(cut)


async def new_stream() -> None:
    cut = TrackedRequest(IN_FLIGHT, TASK[0])
    try:
        await _Reply(_settle_tracked)(NONE, NONE, NONE)
    finally:
        cut.leave()


VARIANTS: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = (
    old_whole,
    new_whole,
    old_stream,
    new_stream,
)


async def _tasks(variant: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        task = loop.create_task(variant())
        TASK[0] = task
        await task


def _callgrind(command: str) -> None:
    subprocess.run(
        ["callgrind_control", command, str(os.getpid())], check=True, stdout=subprocess.DEVNULL
    )


async def _timed(tasks: int, rounds: int) -> dict[str, Any]:
    for variant in VARIANTS:
        await _tasks(variant, 300)
    times: dict[str, list[float]] = {variant.__name__: [] for variant in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            start = time.process_time()
            await _tasks(variant, tasks)
            times[variant.__name__].append((time.process_time() - start) / tasks * 1e6)
    return {
        name: {"best": round(min(us), 2), "median": round(statistics.median(us), 2)}
        for name, us in times.items()
    }


async def _counted(tasks: int) -> list[str]:
    for variant in VARIANTS:
        await _tasks(variant, 300)
    order = []
    for variant in VARIANTS * 2:
        _callgrind("-z")
        await _tasks(variant, tasks)
        _callgrind("-d")
        order.append(variant.__name__)
    return order


def _under_callgrind(tasks: int) -> dict[str, list[int]]:
    out = Path(tempfile.mkdtemp(prefix="cut-scope-"))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p"]
    cmd += [sys.executable, __file__, "--tasks", str(tasks), "--counted"]
    run = subprocess.run(cmd, check=True, capture_output=True, text=True)
    names = run.stdout.split()
    dumps = sorted(out.glob("cg.*.*"), key=lambda path: int(path.name.rsplit(".", 1)[1]))
    counts: dict[str, list[int]] = {}
    for name, dump in zip(names, dumps, strict=True):
        summary = next(
            line for line in dump.read_text().splitlines() if line.startswith("summary:")
        )
        counts.setdefault(name, []).append(round(int(summary.split()[1]) / tasks))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.counted:  # the run under valgrind: the variants' names, in dump order
        print(" ".join(uvloop.run(_counted(args.tasks))))
    elif args.callgrind:
        print(json.dumps({"instructions_per_task": _under_callgrind(args.tasks)}))
    else:
        print(json.dumps({"us_per_task": uvloop.run(_timed(args.tasks, args.rounds))}))


if __name__ == "__main__":
    main()
