"""`farebox serve --workers 2`: both workers serve the openai SDK, /metrics sums them, a
killed worker is replaced, and SIGTERM drains them all, books their requests and leaves no
process or metrics file behind.

Which worker accepts a connection is the kernel's choice, so the test makes it: with one
worker stopped (SIGSTOP) the other accepts every new connection, then the other way round.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from tests.redis_service import require_redis
from tests.servers import free_port, wait_ready

CONFIG = """\
models:
  chat:
    provider: openai
    model: sim-chat
    base_url: sim
    family: vllm
prices:
  chat: {input: 1, output: 2}
"""
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def _children(pid: int) -> list[int]:
    """The workers and the helper (simulator, metrics port) of the supervisor `pid`."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _workers(banner: str) -> list[int]:
    """The worker pids the start-up line names: `workers: 2 (pids A, B; supervisor P)`."""
    pids = banner.split("workers: 2 (pids ", 1)[1].split(";", 1)[0]
    return [int(pid) for pid in pids.split(", ")]


def _requests_total(text: str) -> float:
    """The sum of farebox_requests_total over every label set."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "farebox_requests"
        for sample in family.samples
        if sample.name == "farebox_requests_total"
    )


def _settled_total(url: str, want: float) -> None:
    """Scrape `url` until farebox_requests_total reaches `want` (at most 10 s), never past it."""
    deadline = time.monotonic() + 10
    while (total := _requests_total(httpx.get(url, timeout=10).text)) < want:
        assert time.monotonic() < deadline, f"/metrics counted {total} requests, not {want}"
        time.sleep(0.05)
    assert total == want


def _calls(port: int, whole: int, streamed: int) -> None:
    """`whole` and `streamed` chat calls on one new connection, through the openai SDK."""
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0, timeout=30
    ) as client:
        for _ in range(whole):
            reply = client.chat.completions.create(model="chat", messages=HI, max_tokens=8)
            assert reply.choices[0].message.content
        for _ in range(streamed):
            stream = client.chat.completions.create(
                model="chat",
                messages=HI,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
            assert any(chunk.usage for chunk in stream)


@contextlib.contextmanager
def _only(worker: int, everyone: list[int]) -> Iterator[None]:
    """Stop every worker but `worker` for the block: new connections can only go to it."""
    stopped = [pid for pid in everyone if pid != worker]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def _replacement(supervisor: int, before: list[int], dead: int) -> int:
    """The worker forked in place of `dead`, once it answers."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(_children(supervisor)) - set(before)
        if new and dead not in _children(supervisor):
            return new.pop()
        time.sleep(0.1)
    raise AssertionError("the supervisor did not replace the killed worker")


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    (tmp_path / "farebox.yaml").write_text(CONFIG)
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(tmp_path / "farebox.yaml"),
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        FAREBOX_REDIS_URL=require_redis(),
        FAREBOX_METRICS_PORT=str(metrics_port),
        FAREBOX_LOG_LEVEL="warning",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port), "--workers", "2"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_ready(port, process)
    return process, port, metrics_port, log


def test_two_workers_serve_sum_their_metrics_and_drain_on_sigterm(tmp_path: Path) -> None:
    process, port, metrics_port, log = _serve(tmp_path)
    try:
        banner = log.read_text()
        workers, children = _workers(banner), _children(process.pid)
        assert len(workers) == 2 and len(children) == 3 and set(workers) < set(children)
        with _only(workers[0], workers):
            _calls(port, whole=3, streamed=1)
        with _only(workers[1], workers):
            _calls(port, whole=2, streamed=1)
        # The last stream is counted when its worker books it, which may come just after
        # the client has its usage chunk (and that worker was stopped for the next block).
        _settled_total(f"http://127.0.0.1:{port}/metrics", 7)
        for _ in range(4):  # whichever worker answers, and the supervisor's metrics port
            scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            assert _requests_total(scraped) == 7
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        assert _requests_total(scraped) == 7
        assert "workers: 2" in banner and "shared through Redis" in banner
        metrics_dir = Path(banner.split("metrics summed from ", 1)[1].split()[0])
        assert len(list(metrics_dir.glob("counter_*.db"))) == 2  # one file per worker

        # A worker that dies after it started is replaced; what it counted still counts.
        # Killed once its rows are in the ledger: two writers share one SQLite file, and
        # one waiting on the other's lock may take longer than a flush interval.
        deadline = time.monotonic() + 20
        while _ledger_rows(tmp_path) < 7:
            assert time.monotonic() < deadline, "the workers' rows never reached the ledger"
            time.sleep(0.1)
        os.kill(workers[0], signal.SIGKILL)
        replacement = _replacement(process.pid, children, workers[0])
        with _only(replacement, [replacement, workers[1]]):
            _calls(port, whole=1, streamed=0)
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert _requests_total(scraped) == 8
        children.append(replacement)

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()  # its workers get SIGTERM from the kernel (PR_SET_PDEATHSIG)
            process.wait(timeout=30)
    assert not metrics_dir.exists()
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)  # helper too
    # The killed worker's rows were in the ledger before the kill; the others' writers
    # flushed as they exited.
    assert _ledger_rows(tmp_path) == 8


def _ledger_rows(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "data" / "farebox.db") as ledger:
        (rows,) = ledger.execute("SELECT count(*) FROM requests").fetchone()
    return int(rows)


def test_a_killed_workers_spooled_rows_are_replayed_once_by_its_replacement(
    tmp_path: Path,
) -> None:
    """Rows a worker spooled but never committed (the SQLite file locked by another writer)
    are applied by the worker forked in its place, each once, while its sibling serves on.
    """
    process, port, _, log = _serve(tmp_path)
    try:
        workers, children = _workers(log.read_text()), _children(process.pid)
        # Another writer holds SQLite's write lock: the workers' commits wait out their busy
        # timeout, fail and retry later, and the rows wait in the shared spool.
        blocker = sqlite3.connect(tmp_path / "data" / "farebox.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with _only(workers[0], workers):
                _calls(port, whole=3, streamed=1)
                _wait_for(lambda: _spooled_requests(tmp_path) == 4, "4 rows in the spool")
                os.kill(workers[0], signal.SIGKILL)  # before it could commit them
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        assert _ledger_rows(tmp_path) == 0
        replacement = _replacement(process.pid, children, workers[0])
        _wait_for(lambda: _ledger_rows(tmp_path) == 4, "the replacement replayed 4 rows")
        _wait_for(lambda: _spooled_requests(tmp_path) == 0, "the spool emptied")
        with _only(replacement, [replacement, workers[1]]):
            _calls(port, whole=1, streamed=0)
        with _only(workers[1], [replacement, workers[1]]):
            _calls(port, whole=1, streamed=0)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    with sqlite3.connect(tmp_path / "data" / "farebox.db") as ledger:
        rows, ids = ledger.execute("SELECT count(*), count(DISTINCT id) FROM requests").fetchone()
        (booked,) = ledger.execute("SELECT sum(request_count) FROM tasks").fetchone()
    assert rows == ids == booked == 6  # none lost, none booked twice
    assert _spooled_requests(tmp_path) == 0


def test_rows_wait_out_a_lock_longer_than_the_busy_timeout(tmp_path: Path) -> None:
    """A commit that gives up on SQLite's lock (busy timeout 10 s) is retried: nothing lost."""
    process, port, _, log = _serve(tmp_path)
    try:
        workers = _workers(log.read_text())
        blocker = sqlite3.connect(tmp_path / "data" / "farebox.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with _only(workers[0], workers):
                _calls(port, whole=2, streamed=1)
            _wait_for(lambda: "database write failed" in log.read_text(), "a failed commit", 40)
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        _wait_for(lambda: _ledger_rows(tmp_path) == 3, "the retried commit", 60)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    with sqlite3.connect(tmp_path / "data" / "farebox.db") as ledger:
        rows, ids = ledger.execute("SELECT count(*), count(DISTINCT id) FROM requests").fetchone()
    assert rows == ids == 3
    assert _spooled_requests(tmp_path) == 0


def _spooled_requests(tmp_path: Path) -> int:
    """Request entries waiting in the shared spool (segments not yet committed)."""
    count = 0
    for segment in (tmp_path / "data" / "spool").glob("*.jsonl"):
        with contextlib.suppress(FileNotFoundError):  # committed and deleted meanwhile
            count += segment.read_bytes().count(b'"kind":"request"')
    return count


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
