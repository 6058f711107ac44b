"""The ledger flush's single pieces on the event loop, by where each starts and stops.

Run: `taskset -c 1 python bench/ledger_pieces.py [--src DIR] [--rate 700] [--seconds 6]
[--min-us 40] [--top 12]`. A `LedgerWriter` (SQLite file) runs as in the gateway (spool
and drain loops, flush every 0.2 s) on asyncio's loop (uvloop's handles cannot be timed
from Python) while this process submits `--rate` records a second, idle otherwise. Each
callback the loop runs for the writer's tasks is timed by the loop thread's CPU
(`time.thread_time`) and keyed by where its coroutine was resumed and where it was
suspended again: a piece over `--min-us` is one a request arriving meanwhile waits for.

A *slice* (resumed by `batch.turn` and suspended in it again: the flush's budgeted
work, ~`LOOP_SLICE_S`) is told apart from the *other* pieces (a timer, a thread's result,
SQLAlchemy, the spool): those are the single pieces this tool is for. Prints (stderr) the
keys with the most CPU in pieces over `--min-us`: count, mean, max; then one JSON line:
the slices' and the other pieces' count per flush, p50 / p99 / max and CPU per flush.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import json
import sys
import time

from checkout import use_checkout
from ledger_flush import small_records, warm_sqlite_writer

Frames = tuple[tuple[str, int], ...]


def _frames(task: asyncio.Task) -> Frames:
    """The task's coroutine stack, outermost first, as (function, line): cheap to take
    after every piece (formatting waits for a piece worth reporting)."""
    if task.done():
        return (("done", 0),)
    frames, coro = [], task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append((frame.f_code.co_name, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return tuple(frames)


_GENERIC = {"pause", "turn", "sleep", "__sleep0"}


def _label(frames: Frames) -> str:
    """The innermost three frames that are not the scheduler's (`pause`, `turn`)."""
    named = [f"{name}:{line}" for name, line in frames[1:] if name not in _GENERIC]
    return ">".join(named[-3:]) + (" (turn)" if _in_turn(frames) else "")


def _in_turn(frames: Frames) -> bool:
    return any(name == "turn" for name, _ in frames)


async def _run(args: argparse.Namespace) -> dict[str, object]:
    pieces: dict[str, list[float]] = {"slices": [], "others": []}
    where: dict[str, list[float]] = {}
    last: dict[asyncio.Task, Frames] = {}  # where each task was suspended: it resumes there
    async with warm_sqlite_writer() as writer:
        run = asyncio.events.Handle._run

        def timed(handle: asyncio.events.Handle) -> None:
            owner = getattr(handle._callback, "__self__", None)
            if not isinstance(owner, asyncio.Task) or not owner.get_name().startswith("ledger-"):
                run(handle)
                return
            before = last.get(owner, ())
            start = time.thread_time()
            run(handle)
            spent = time.thread_time() - start
            after = last[owner] = _frames(owner)
            slice_ = _in_turn(before) and _in_turn(after)
            pieces["slices" if slice_ else "others"].append(spent)
            if spent * 1e6 >= args.min_us:
                key = f"{'slice' if slice_ else 'OTHER'} {_label(before)}  ->  {_label(after)}"
                where.setdefault(key, []).append(spent)

        records = small_records(int(args.seconds * args.rate) + 1)
        cpu0 = time.thread_time()
        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        gap = 1 / args.rate
        end = time.perf_counter() + args.seconds
        for record in records:
            if time.perf_counter() >= end:
                break
            writer.submit(record)
            await asyncio.sleep(gap)
        await writer.flush()
        asyncio.events.Handle._run = run  # type: ignore[method-assign]
        cpu = time.thread_time() - cpu0
        flushes = args.seconds / 0.2
    ranked = sorted(where.items(), key=lambda kv: -sum(kv[1]))[: args.top]
    for key, spent in ranked:
        print(
            f"{len(spent):5d} x {sum(spent) / len(spent) * 1e6:6.0f} us"
            f" (max {max(spent) * 1e6:5.0f})  {key}",
            file=sys.stderr,
        )
    out: dict[str, object] = {"src": args.src}
    for kind, spent in pieces.items():
        spent.sort()
        n = len(spent) or 1
        out[kind] = {
            "per_flush": round(len(spent) / flushes, 1),
            "p50_us": round(spent[n // 2] * 1e6, 1) if spent else None,
            "p99_us": round(spent[int(n * 0.99)] * 1e6, 1) if spent else None,
            "max_us": round(spent[-1] * 1e6, 1) if spent else None,
            "cpu_us_per_flush": round(sum(spent) * 1e6 / flushes, 1),
        }
    return out | {"loop_cpu_s": round(cpu, 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src")
    p.add_argument("--rate", type=float, default=700)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--min-us", type=int, default=40)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    use_checkout(args.src)
    sys.setswitchinterval(0.001)
    print(json.dumps(asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
