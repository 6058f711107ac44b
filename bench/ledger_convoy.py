"""How late an event loop wakes while a thread runs a long sqlite3 `executemany`.

Run pinned to one core, as the gateway is in the hot-path benches:
`taskset -c 1 python bench/ledger_convoy.py [--seconds 10] [--rows 140] [--slice 16]
[--rounds 2]`. No gateway code: plain sqlite3 (WAL, a 47-column table with five indexes,
as the ledger's request rows) and asyncio, to show the mechanism behind
gateway.ledger.batch `_execute_paced`.

Every 0.2 s a worker thread inserts `--rows` rows in one transaction, either in one
`executemany` (`whole`) or `--slice` rows at a time with a `time.sleep(1e-6)` between
slices (`paced`). Meanwhile the loop sleeps 0.5 ms, records how late it woke, and runs
~150 µs of Python (a request's work, holding the interpreter lock), again and again.
Wakes whose sleep overlapped a write are `beside`, the others `alone` (the box's own
lateness falls on both). Prints, per mode and round, both classes' p50 / p90 / p99 in ms
and the write's median thread CPU and wall time; modes alternate within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

COLUMNS = 47
INSERT = f"INSERT INTO r VALUES ({', '.join('?' * COLUMNS)}) ON CONFLICT (id) DO NOTHING"


def _database(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    names = ", ".join(f"c{i}" for i in range(1, COLUMNS))
    db.execute(f"CREATE TABLE r (id TEXT PRIMARY KEY, {names})")
    for i in range(1, 6):
        db.execute(f"CREATE INDEX i{i} ON r (c{i}, c{i + 5})")
    return db


class Writer:
    """Inserts batches of fresh rows, whole or paced, and times each batch."""

    def __init__(self, db: sqlite3.Connection, rows: int, slice_rows: int | None) -> None:
        self.db, self.rows, self.slice_rows = db, rows, slice_rows
        self.serial = 0
        self.running = 0
        self.done = 0
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def batch(self) -> list[tuple[object, ...]]:
        out = []
        for _ in range(self.rows):
            self.serial += 1
            n = self.serial
            values = (f"t{random.random()}" if j % 3 == 0 else n * j for j in range(1, COLUMNS))
            out.append((f"req-{n:020d}", *values))
        return out

    def write(self, rows: list[tuple[object, ...]]) -> None:
        self.running += 1
        cpu, wall = time.thread_time(), time.perf_counter()
        cursor = self.db.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        step = self.slice_rows or len(rows)
        for start in range(0, len(rows), step):
            if start:
                time.sleep(1e-6)
            cursor.executemany(INSERT, rows[start : start + step])
        cursor.execute("COMMIT")
        self.cpu.append(time.thread_time() - cpu)
        self.wall.append(time.perf_counter() - wall)
        self.running -= 1
        self.done += 1


def _work() -> int:
    total = 0
    for i in range(3000):
        total += i * i
    return total


async def _writes(writer: Writer, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool:
        while not stop.is_set():
            await asyncio.sleep(0.2)
            await loop.run_in_executor(pool, writer.write, writer.batch())


async def _measure(writer: Writer, seconds: float) -> tuple[list[float], list[float]]:
    stop = asyncio.Event()
    writes = asyncio.create_task(_writes(writer, stop))
    beside: list[float] = []
    alone: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        running, done = writer.running, writer.done
        asleep = time.perf_counter()
        await asyncio.sleep(0.0005)
        late = (time.perf_counter() - asleep - 0.0005) * 1000
        overlapped = running or writer.running or writer.done != done
        (beside if overlapped else alone).append(late)
        _work()
    stop.set()
    await writes
    return beside, alone


def _summary(values: list[float]) -> str:
    if not values:
        return "n=0"
    ordered = sorted(values)

    def at(p: float) -> float:
        return ordered[min(int(len(ordered) * p), len(ordered) - 1)]

    return f"n={len(ordered)} p50={at(0.5):.3f} p90={at(0.9):.3f} p99={at(0.99):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=140, help="rows a write (a c=1 flush)")
    parser.add_argument("--slice", type=int, default=16, help="rows per paced executemany")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sys.setswitchinterval(0.001)  # as the serving process sets it
    with tempfile.TemporaryDirectory(prefix="ledger-convoy-") as tmp:
        for round_ in range(args.rounds):
            for mode, slice_rows in (("whole", None), ("paced", args.slice)):
                db = _database(Path(tmp) / f"{mode}-{round_}.db")
                writer = Writer(db, args.rows, slice_rows)
                beside, alone = asyncio.run(_measure(writer, args.seconds))
                cpu = statistics.median(writer.cpu) * 1000 if writer.cpu else 0.0
                wall = statistics.median(writer.wall) * 1000 if writer.wall else 0.0
                print(
                    f"{mode:5} beside {_summary(beside)} | alone {_summary(alone)}"
                    f" | write cpu {cpu:.2f} ms, wall {wall:.2f} ms"
                )
                db.close()


if __name__ == "__main__":
    main()
