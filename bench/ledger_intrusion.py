"""How much of the ledger flush's loop work lands inside a request's busy phase (c=1 model).

Run: `taskset -c 1 python bench/ledger_intrusion.py [--src DIR] [--seconds 6] [--set NAME=V]`.
A `LedgerWriter` (SQLite) flushes as in the gateway while a model request loop (asyncio's
loop: uvloop's handles cannot be timed from Python) runs at concurrency 1: wait 0.25 ms
(the upstream), a busy phase of 6 pieces of 15-80 us of Python separated by loop turns (a
request's callbacks), wait 0.2 ms (the client), and one record submitted per request.
Each callback of the ledger's tasks that starts while a busy phase is open has its CPU
(thread_time) counted against that request: robust to a busy box.
Prints the requests, the share with any intrusion, and the intrusion's p50/p99/max (us);
and `delay_*`: per request, the wall time ledger callbacks ran past the moment one of its
two waits ended (the upstream's reply or the client's next request was due), so what the
flush's slices in the idle gaps add to its latency (ledger callbacks only: the box's
other lateness is not counted; a callback preempted by another process counts whole).
`--where` lists (stderr) where the callbacks over 50 us were suspended after running.
The aiosqlite thread's CPU is not counted (a base tree's rows there: the convoy is not seen).
`--set NAME=V` sets a `gateway.ledger.batch` constant (e.g. `MAX_DEFER_S=0.0004`).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import bisect
import json
import sys
import time

from checkout import use_checkout
from ledger_flush import small_records, warm_sqlite_writer

PIECES_US = (40, 15, 80, 20, 60, 30)


async def _run(args):
    from gateway.ledger import batch

    for item in args.set or []:
        name, value = item.split("=")
        setattr(batch, name, float(value))
    async with warm_sqlite_writer() as writer:
        records = small_records(int(args.seconds * 1500))
        state = {"busy": False, "hit": 0.0}
        run = asyncio.events.Handle._run

        spans: list[tuple[float, float]] = []  # every ledger callback's wall start, end

        def timed(handle):
            owner = getattr(handle._callback, "__self__", None)
            if not isinstance(owner, asyncio.Task) or not owner.get_name().startswith("ledger-"):
                return run(handle)
            if not state["busy"]:
                began = time.perf_counter()
                run(handle)
                spans.append((began, time.perf_counter()))
                return None
            start = time.thread_time()
            run(handle)
            spent = time.thread_time() - start
            state["hit"] += spent
            if args.where and spent > 50e-6:
                chain, coro = [], (owner.get_coro() if not owner.done() else None)
                while coro is not None:
                    frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                    if frame is None:
                        break
                    chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
                    coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
                key = " > ".join(c for c in chain[2:] if not c.startswith(("sleep", "__sleep0")))[
                    -150:
                ]
                where.setdefault(key, []).append(spent)

        asyncio.events.Handle._run = timed
        hits = []
        waits: list[tuple[float, float, float, float]] = []  # (due, woke) of both waits
        where: dict[str, list[float]] = {}
        end = time.perf_counter() + args.seconds
        i = 0
        client_due = client_woke = time.perf_counter()
        while time.perf_counter() < end and i < len(records):
            upstream_due = time.perf_counter() + 0.00025
            await asyncio.sleep(0.00025)
            waits.append((client_due, client_woke, upstream_due, time.perf_counter()))
            state["busy"], state["hit"] = True, 0.0
            for us in PIECES_US:
                stop = time.thread_time() + us / 1e6
                while time.thread_time() < stop:
                    pass
                await asyncio.sleep(0)
            state["busy"] = False
            hits.append(state["hit"])
            writer.submit(records[i])
            i += 1
            client_due = time.perf_counter() + 0.0002
            await asyncio.sleep(0.0002)
            client_woke = time.perf_counter()
        asyncio.events.Handle._run = run
    for key, spent in sorted(where.items(), key=lambda kv: -sum(kv[1]))[:8]:
        print(f"{len(spent):5d} x {sum(spent) / len(spent) * 1e6:6.0f} us  {key}", file=sys.stderr)
    delays = sorted(_ledger_delay(spans, wait) for wait in waits)
    hits.sort()
    n = len(hits)
    return {
        "delay_p50_us": round(delays[len(delays) // 2] * 1e6, 1),
        "delay_p99_us": round(delays[int(len(delays) * 0.99)] * 1e6, 1),
        "delay_max_us": round(delays[-1] * 1e6, 1),
        "delayed": round(sum(d > 0 for d in delays) / len(delays), 3),
        "requests": n,
        "with_intrusion": round(sum(h > 0 for h in hits) / n, 3),
        "p50_us": round(hits[n // 2] * 1e6, 1),
        "p99_us": round(hits[int(n * 0.99)] * 1e6, 1),
        "max_us": round(hits[-1] * 1e6, 1),
        "mean_us": round(sum(hits) / n * 1e6, 1),
    }


def _ledger_delay(spans: list[tuple[float, float]], wait: tuple[float, ...]) -> float:
    """Wall time ledger callbacks ran between each wait's due moment and its wake-up."""
    total = 0.0
    for due, woke in (wait[:2], wait[2:]):
        first = bisect.bisect_left(spans, (due - 0.01, 0.0))
        for began, ended in spans[first:]:
            if began >= woke:
                break
            total += max(0.0, min(ended, woke) - max(began, due))
    return total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--src")
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--set", action="append")
    p.add_argument("--where", action="store_true", help="where intrusions over 50 us came from")
    args = p.parse_args()
    use_checkout(args.src)
    sys.setswitchinterval(0.001)
    print(json.dumps({"src": args.src} | asyncio.run(_run(args))))


if __name__ == "__main__":
    main()
