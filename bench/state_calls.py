"""CPU per request of the shared-state calls the chat path makes, against a real Redis.

Run: `python bench/state_calls.py [--redis-url redis://127.0.0.1:6379/12] [--task | --tasks]
[-n 8000] [-c 32] [--src DIR] [--callgrind PAIRS]`.

Each simulated request makes the calls a small chat request makes through `FallbackState`
(the gateway's shared state with Redis configured), in the pipeline's order: read the
prefix history (and, for a request of a task, its pinned effort first), rebuild the
records the prefix check compares with, remember this prompt's record, and (a task) add
its cost. `-c` requests run at once, as under load: of one task (`--task`), or each
client's of its own (`--tasks`, as agents running side by side). Prints the process's CPU time per
request (utime+stime, `time.process_time`), wall time per request and Redis's CPU per
request (`INFO cpu`: run it on a Redis nothing else uses). `--src` imports
`gateway` from another checkout (an A/B of two trees, run alternately); to compare with
and without hiredis, put a directory holding a `hiredis.py` that raises ImportError
first on PYTHONPATH. Every key lives under a namespace of the run's own, deleted after.
`--callgrind PAIRS` counts instead the loop's instructions per request under callgrind
(collection on for the measured requests alone; Redis is another process, not counted),
this checkout and `--src` alternating: exact where CPU time on a shared box is not.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from checkout import use_checkout

# A small request's prefix record, as the gateway stores it (bench/pipeline_cpu.py's body).
RECORD: dict[str, Any] = {
    "family": "openai",
    "model": "mock-gpt",
    "fingerprints": [f"{n:032x}" for n in range(6)],
    "segment_names": ["effort", "system", "tools", "tool_choice", "response_format", "m0"],
    "segment_digests": [f"{n + 10:032x}" for n in range(6)],
    "canonical_digests": [f"{n + 20:032x}" for n in range(6)],
    "cumulative_tokens": [1, 2, 3, 4, 5, 18],
    "stable_count": 5,
    "header_count": 5,
    "breakpoints": [],
    "settings": {},
    "reported_prompt_tokens": 18,
}


async def _request(state: Any, record_of: Any, keys: list[str], task: str | None) -> None:
    if task is not None:
        await state.task_value(task, "effort")
    history = await state.prefix_history(keys)
    for item in history:
        record_of(item)
    await state.remember_prefix(keys, RECORD, 600, 4)
    if task is not None:
        await state.add_task_cost(task, Decimal("0.000125"), 600)


async def _run(args: argparse.Namespace) -> None:
    from gateway.pipeline.prefix import _record_of
    from gateway.settings import RedisLimits
    from gateway.state.fallback import FallbackState

    namespace = f"bench-state-{uuid.uuid4().hex}"
    limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10)
    state = await FallbackState.connect(args.redis_url, namespace, limits)

    def task_of(client: int) -> str | None:
        return f"t{client}" if args.tasks else "t1" if args.task else None

    def keys_of(task: str | None) -> list[str]:
        return [*([f"task:{task}"] if task else []), "caller:anonymous:bench-chat"]

    per_client = args.n // args.c
    try:
        for _ in range(20):  # connections opened, scripts loaded: not per-request costs
            await asyncio.gather(
                *(
                    _request(state, _record_of, keys_of(task_of(i)), task_of(i))
                    for i in range(args.c)
                )
            )

        async def client(number: int) -> None:
            task = task_of(number)
            keys = keys_of(task)
            for _ in range(per_client):
                await _request(state, _record_of, keys, task)

        markers = ctypes.CDLL(args.markers) if args.markers else None
        if markers is not None:
            markers.cg_toggle()  # counted from here (callgrind's collection on)
        redis_cpu = await _redis_cpu_s(state)
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client(number) for number in range(args.c)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        redis_cpu = await _redis_cpu_s(state) - redis_cpu
        if markers is not None:
            markers.cg_toggle()
        if state.degraded:
            raise SystemExit("Redis went away during the run: the numbers are not Redis's")
        sent = per_client * args.c
        print(
            f"{args.src or 'this checkout'}: task={args.task} tasks={args.tasks} c={args.c} "
            f"n={sent} cpu/req={cpu / sent * 1e6:.1f} us wall/req={wall / sent * 1e6:.1f} us "
            f"redis cpu/req={redis_cpu / sent * 1e6:.1f} us"
        )
    finally:
        names = await state.redis.client.keys(f"{namespace}:*")
        if names:
            await state.redis.client.delete(*names)
        await state.aclose()


async def _redis_cpu_s(state: Any) -> float:
    """Redis's CPU seconds so far (`INFO cpu`; its other clients' work counts too)."""
    info = await state.redis.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _counted(args: argparse.Namespace, tree: str | None) -> dict[str, Any]:
    """Instructions per request of one run under callgrind, the measured loop alone."""
    from stream_instructions import _markers  # bench/ is the script folder: sys.path[0]

    folder = Path(tempfile.mkdtemp(prefix="state-calls-cg-"))
    library = _markers(folder)
    out = folder / "cg.out"
    command = [
        *("valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}"),
        *(sys.executable, __file__, "--markers", str(library), "--redis-url", args.redis_url),
        *("-n", str(args.n), "-c", str(args.c), *(["--task"] if args.task else [])),
        *(["--tasks"] if args.tasks else []),
        *(["--src", tree] if tree else []),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"^summary: (\d+)", out.read_text() if out.exists() else "", re.M)
    if proc.returncode or found is None:
        raise RuntimeError(f"the run under valgrind failed: {proc.stderr[-2000:]}")
    sent = args.n // args.c * args.c
    return {"src": tree or "this checkout", "instructions_per_req": int(found.group(1)) // sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--task", action="store_true", help="requests of one task (X-Task-Id)")
    parser.add_argument(
        "--tasks", action="store_true", help="each client's requests of a task of its own"
    )
    parser.add_argument("-n", type=int, default=8000)
    parser.add_argument("-c", type=int, default=32)
    parser.add_argument("--src", help="import gateway from this checkout")
    parser.add_argument(
        "--callgrind",
        type=int,
        metavar="PAIRS",
        help="count instructions per request under callgrind instead, this checkout and "
        "--src alternating PAIRS times (keep -n small: ~50x slower)",
    )
    parser.add_argument("--markers", help=argparse.SUPPRESS)  # the counted child's toggles
    args = parser.parse_args()
    if args.callgrind:
        trees = [None, args.src] if args.src else [None]
        for _ in range(args.callgrind):
            for tree in trees:
                print(json.dumps(_counted(args, tree)), flush=True)
        return
    use_checkout(args.src)
    import uvloop

    uvloop.run(_run(args))


if __name__ == "__main__":
    main()
