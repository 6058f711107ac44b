"""wrk and nginx, the workers comparison's load (bench/native_load.py), measure what
loadgen.py and perf-floor's mock would.

nginx must answer as the mock does (the same reply, whole or streamed by the Accept header
Farebox sends), and a wrk run through a real `farebox serve` must be counted the way
bench/hotpath.py counts a loadgen run: requests, CPU of the gateway and of the tools,
upstream connections opened, and every request billed in the ledger.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hotpath_load import SMALL_JSON_C64, SMALL_SSE_C64, Budget, Scenario, measure
from hotpath_procs import free_port
from hotpath_targets import MODEL, UPSTREAM_MODEL, popen_mock, start_farebox
from native_load import (
    WRK_SCRIPT,
    NativeLoad,
    load_files,
    missing,
    nginx_conf,
    start_nginx,
    stream_reply,
    summary,
    whole_reply,
)

from tests.redis_service import require_redis

FLOOR = Path(
    os.environ.get("FAREBOX_PERF_FLOOR", Path(__file__).parents[3] / "shared" / "perf-floor")
)
SHORT = Budget(seconds=1, small_c1=0, small_c64=0, large=0)


@pytest.fixture(scope="module")
def tools() -> None:
    absent = missing()
    if absent:
        message = f"{absent}; run `make load-tools`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _post(url: str, body: dict[str, object], stream: bool) -> tuple[str, bytes]:
    headers = {"content-type": "application/json"}
    if stream:
        headers["accept"] = "text/event-stream"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.headers["content-type"], reply.read()


def _events(body: bytes) -> list[object]:
    """The SSE events' data, parsed; `[DONE]` as the string."""
    found: list[object] = []
    for line in body.decode().split("\n"):
        if line.startswith("data: "):
            data = line[6:]
            found.append(data if data == "[DONE]" else json.loads(data))
    return found


def _without_ids(value: object) -> object:
    """What a client reads of a reply: not its id, time or prompt's token count (the mock
    counts ~4 characters a token of the prompt; nginx answers 4 for the bench's request)."""
    if isinstance(value, dict):
        drop = {"id", "created", "prompt_tokens", "total_tokens"}
        return {k: _without_ids(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def test_nginx_answers_what_perf_floors_mock_answers(tools: None, tmp_path: Path) -> None:
    nginx, base = start_nginx(tmp_path, free_port(), UPSTREAM_MODEL, "0")
    mock_port = free_port()
    mock = popen_mock(mock_port, FLOOR)
    try:
        body = {"model": UPSTREAM_MODEL, "messages": [{"role": "user", "content": "Say hi."}]}
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        mock_url = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        _until_served(mock_url, body)
        url = f"{base}/v1/chat/completions"
        kind, whole = _post(url, body, stream=False)
        assert kind == "application/json" and whole == whole_reply(UPSTREAM_MODEL)
        assert _without_ids(json.loads(whole)) == _without_ids(
            json.loads(_post(mock_url, body, False)[1])
        )
        kind, streamed = _post(url, stream_body, stream=True)
        assert kind == "text/event-stream" and streamed == stream_reply(UPSTREAM_MODEL)
        events = _events(streamed)
        assert events == _events(stream_reply(UPSTREAM_MODEL))
        assert _without_ids(events) == _without_ids(_events(_post(mock_url, stream_body, True)[1]))
        assert events[-1] == "[DONE]" and len(events) == 1 + 16 + 1 + 1 + 1
    finally:
        nginx.stop()
        mock.kill()
        mock.wait()


def test_nginx_that_cannot_start_says_why(tools: None, tmp_path: Path) -> None:
    # bench/hotpath.py then runs the workers comparison on loadgen.py, saying so.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match=r"nginx exited:(.|\n)*Address already in use"):
            start_nginx(tmp_path, taken.getsockname()[1], UPSTREAM_MODEL, "0")


def test_wrks_summary_reads_as_loadgens() -> None:
    found = {"requests": 3000, "duration_us": 2_000_000, "connect": 0, "read": 0, "write": 0}
    found |= {"status": 2, "timeout": 1, "p50_us": 20_500, "p99_us": 41_000}
    assert summary(found) == {
        "completed": 2998,
        "sent": 3000,
        "errors": {"status": 2, "timeout": 1},
        "rps": 1500.0,
        "lat_ms": {"p50": 20.5, "p99": 41.0},
    }


def test_the_report_shows_the_wrk_script_and_the_nginx_config_without_its_replies(
    tmp_path: Path,
) -> None:
    (tmp_path / "nginx").mkdir()
    (tmp_path / "nginx" / "nginx.conf").write_text(nginx_conf(tmp_path / "nginx", 43210, "m"))
    (tmp_path / "wrk-post.lua").write_text(WRK_SCRIPT)
    found = load_files(tmp_path)
    assert found["wrk-post.lua"] == WRK_SCRIPT
    conf = found["nginx.conf"]
    assert conf.count("return 200 '...';") == 2 and "chatcmpl" not in conf
    assert "listen 127.0.0.1:PORT;" in conf and "pid WORK/nginx.pid;" in conf
    assert str(tmp_path) not in conf and "43210" not in conf


def test_the_native_load_runs_small_c64_requests_only(tools: None, tmp_path: Path) -> None:
    nginx, base = start_nginx(tmp_path, free_port(), UPSTREAM_MODEL, "0")
    try:
        load = NativeLoad(nginx, base, "0", tmp_path)
        c1 = Scenario("json-c1", "c=1", False, 1)
        with pytest.raises(RuntimeError, match="small c=64 requests only"):
            load.run(f"{base}/v1/chat/completions", MODEL, c1, SHORT)
    finally:
        nginx.stop()


def test_a_wrk_run_through_farebox_is_counted_and_billed(tools: None, tmp_path: Path) -> None:
    redis = require_redis()
    nginx, base = start_nginx(tmp_path, free_port(), UPSTREAM_MODEL, "0")
    gateway = start_farebox("farebox-native", tmp_path, base, "0,1", None, 1, redis)
    completed = {False: 1, True: 0}  # streamed or not: requests wrk saw answered
    try:
        load = NativeLoad(nginx, base, "0", tmp_path, ("127.0.0.1", 6379))
        _until_served(
            gateway.url, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        )
        for scenario in (SMALL_JSON_C64, SMALL_SSE_C64):
            warm = measure(load, "warm", gateway.pid, gateway.url, MODEL, scenario, SHORT)
            run = measure(load, "farebox", gateway.pid, gateway.url, MODEL, scenario, SHORT)
            completed[scenario.stream] += warm.completed + run.completed
            assert run.sent > 64 and run.completed == run.sent and not run.errors, run
            assert run.rps > 0 and 0 < run.p50_ms <= run.p99_ms
            assert run.ttft_p50_ms is None  # wrk measures none; nothing is made up
            assert run.cpu_ms_per_request and run.main_cpu_ms_per_request
            assert run.load_cpu_ms_per_request and run.load_cpu_ms_per_request > 0
            assert run.redis_cpu_ms_per_request is not None
            # The pool reuses its connections, streams included: it opens again only those
            # it closed when wrk's previous run ended with up to 64 requests cut (a client
            # gone mid-reply), never one per request.
            assert run.upstream_opens is not None and run.opens_per_request is not None
            assert run.upstream_opens <= 64 and run.upstream_opens < run.sent / 2, run
    finally:
        gateway.stop()  # SIGTERM: the ledger is flushed
        nginx.stop()
    ledger = sqlite3.connect(tmp_path / "farebox-native-data" / "farebox.db")
    query = (
        "SELECT streamed, count(*), sum(completion_tokens), min(status_code), "
        "max(status_code) FROM requests GROUP BY streamed"
    )
    for streamed, rows, tokens, low, high in ledger.execute(query):
        # wrk's last requests in flight when its time is up are dropped by wrk, not by the
        # gateway: each run of 64 connections may add up to 64 rows that wrk did not count.
        assert completed[bool(streamed)] <= rows <= completed[bool(streamed)] + 2 * 64
        assert tokens == 16 * rows and low == high == 200


def _until_served(url: str, body: dict[str, object]) -> None:
    for _ in range(300):
        try:
            _post(url, body, False)
            return
        except urllib.error.HTTPError as exc:  # not ready yet: its reply holds a socket
            exc.close()
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} served nothing in 30 s")
