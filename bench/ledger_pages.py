"""What one flush writes to a SQLite ledger that already holds rows: write calls, bytes, CPU.

Run: `python bench/ledger_pages.py [--src CHECKOUT] [--fill 200000] [-n 200] [--rounds 20]`.

Builds a fresh SQLite ledger (WAL, as `make_engine` opens it), fills it with `--fill`
small untasked request records (bench/ledger_flush.py's, ids drawn by the checkout's
`new_row_id`) in batches of 1,000, then applies `--rounds` batches of `-n` fresh records,
each in one transaction as the writer's drain does (`store.apply_batch`), and reads around
each from /proc/self/io: `syscw` (write system calls of every thread, `pwrite64` of the
WAL and its checkpoints included) and `wchar` (bytes they wrote), and the process's CPU
(`time.process_time`: the aiosqlite thread counts), and `syscr` (read calls: a page
not in SQLite's cache is a `pread64`). SQLite writes each page a transaction changed to
the WAL at commit (and copies them to the database at a checkpoint, every 1,000 WAL
pages), so the write calls per row follow how many distinct pages a batch touches: a key
that lands on a random page of a large index costs a page per row.

Prints one JSON object: per row, over all measured rounds (checkpoints included), write
calls, KiB written and read calls, and the median round's CPU microseconds; and the
checkout the gateway came from. `--src` imports the gateway from another checkout (an A/B
of two trees: `git worktree add /tmp/before <commit>`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]
from ledger_flush import small_records


def _io() -> tuple[int, int, int]:
    """This process's write and read system calls and bytes written so far (all threads)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["syscw"]), int(fields["wchar"]), int(fields["syscr"])


async def _run(directory: Path, fill: int, n: int, rounds: int) -> dict[str, Any]:
    from gateway.ledger import make_engine, migrate, store

    url = f"sqlite+aiosqlite:///{directory / 'ledger.db'}"
    await migrate(url)
    engine = make_engine(url)
    try:
        for _ in range(0, fill, 1000):
            async with engine.begin() as connection:
                await store.apply_batch(connection, small_records(1000))
        calls: list[float] = []
        reads: list[float] = []
        kib: list[float] = []
        cpu: list[float] = []
        for _ in range(rounds):
            batch = small_records(n)
            writes, written, read = _io()
            started = time.process_time()
            async with engine.begin() as connection:
                await store.apply_batch(connection, batch)
            cpu.append((time.process_time() - started) / n * 1e6)
            after_writes, after_written, after_read = _io()
            calls.append((after_writes - writes) / n)
            reads.append((after_read - read) / n)
            kib.append((after_written - written) / n / 1024)
    finally:
        await engine.dispose()
    return {
        "write_calls_per_row": round(statistics.fmean(calls), 2),
        "kib_per_row": round(statistics.fmean(kib), 2),
        "read_calls_per_row": round(statistics.fmean(reads), 2),
        "cpu_us_per_row": round(statistics.median(cpu), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--fill", type=int, default=200_000, help="rows stored before")
    parser.add_argument("-n", type=int, default=200, help="rows per measured batch")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    use_checkout(args.src)
    import gateway

    with tempfile.TemporaryDirectory(prefix="ledger-pages-") as tmp:
        result = asyncio.run(_run(Path(tmp), args.fill, args.n, args.rounds))
    print(json.dumps({"gateway": gateway.__file__, "fill": args.fill, "n": args.n, **result}))


if __name__ == "__main__":
    main()
