"""The workers comparison states the ratio this box allows, from the CPU the load takes.

On 2 cores, two workers share both with loadgen, the mock and Redis, so 2x one worker is
out of reach; bench/hotpath.py measures the load tools' CPU per request and the report's
"what bounds it" column gives the ratio attainable with those numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hotpath_goals import W1, W2, Results, goals, workers_bound
from hotpath_load import Run, combine, redis_cpu_seconds

from tests.redis_service import require_redis


def _run(target: str, cpu: float, rps: float, load: float | None, redis: float | None) -> Run:
    run = Run(target, "json-c64", completed=3000, sent=3000, rps=rps, loadavg_1m=2.0)
    run.cpu_ms_per_request = cpu
    run.load_cpu_ms_per_request, run.redis_cpu_ms_per_request = load, redis
    return run


def _results(*runs: Run) -> Results:
    results = Results()
    for run in runs:
        results.runs.setdefault(run.target, {})[run.scenario] = run
    return results


def test_the_bound_is_two_cores_shared_with_the_load_against_one_core_alone() -> None:
    # 1 worker: 0.8 ms -> 1,250 req/s on a core; 2 workers: 2000 / (0.9 + 0.5 + 0.1) = 1,333
    results = _results(_run(W1, 0.8, 1100, 0.5, 0.1), _run(W2, 0.9, 1300, 0.5, 0.1))
    text = workers_bound(results, "json-c64")
    assert "1 worker 0.8 ms, so one worker serves at most 1,250 req/s" in text
    assert "at most 1,333 req/s" in text and "at most 1.07x" in text
    assert "other processes" not in text  # not measured: not claimed
    assert "loadgen and mock 0.5 ms + Redis 0.1 ms" in text
    (workers,) = [goal for goal in goals(results) if goal.name.startswith("2 workers")]
    assert workers.measured == "1.18 x" and workers.bound == text


def test_one_worker_is_bounded_by_its_event_loop_not_its_whole_process() -> None:
    # The whole process took 0.6 ms a request, its loop thread 0.5 (the ledger's thread
    # the rest, on the other core): one worker reaches 2,000 req/s, not 1,667, and two
    # at most 2000 / (0.7 + 0.2) = 2,222: 1.11x, not the 1.33x the whole process implies.
    one, two = _run(W1, 0.6, 1900, 0.2, 0.0), _run(W2, 0.7, 1700, 0.2, 0.0)
    one.main_cpu_ms_per_request = 0.5
    text = workers_bound(_results(one, two), "json-c64")
    assert "1 worker's event loop 0.5 ms (whole process 0.6 ms)" in text
    assert "at most 2,000 req/s" in text and "at most 2,222 req/s, so at most 1.11x" in text


def test_what_other_processes_took_is_stated_with_what_it_left() -> None:
    # Others took 0.4 ms a request during the 2-worker run: 2000 / (0.7 + 0.2 + 0.4) = 1,538
    one, two = _run(W1, 0.6, 1900, 0.2, 0.0), _run(W2, 0.7, 1500, 0.2, 0.0)
    one.main_cpu_ms_per_request, two.others_cpu_ms_per_request = 0.5, 0.4
    text = workers_bound(_results(one, two), "json-c64")
    assert "other processes on the box took 0.4 ms per request" in text
    assert "which left about 1,538 req/s (0.77x)" in text


def test_one_worker_sharing_the_cores_with_a_heavy_load_is_bounded_by_both() -> None:
    # loop 0.5 ms -> 2,000 req/s, but 2000 / (0.6 + 0.5 + 0.0) = 1,818 on the 2 cores
    one, two = _run(W1, 0.6, 1200, 0.5, 0.0), _run(W2, 0.7, 1200, 0.5, 0.0)
    one.main_cpu_ms_per_request = 0.5
    assert "one worker serves at most 1,818 req/s" in workers_bound(_results(one, two), "json-c64")


def test_the_load_core_caps_the_rate_when_the_load_tools_need_more_than_half() -> None:
    # l = 1.6 ms: core 0 drives at most 625 req/s, under 2000 / (0.5 + 1.6) = 952, for
    # one worker as for two: no second worker can help
    results = _results(_run(W1, 0.5, 600, 1.6, None), _run(W2, 0.5, 620, 1.6, None))
    text = workers_bound(results, "json-c64")
    assert "one worker serves at most 625 req/s" in text
    assert "at most 625 req/s, so at most 1.00x" in text


def test_without_the_load_tools_cpu_it_says_nothing() -> None:
    results = _results(_run(W1, 0.8, 1100, None, None), _run(W2, 0.9, 1300, None, None))
    assert workers_bound(results, "json-c64") == ""


def test_passes_combine_the_load_tools_cpu_weighted_by_requests() -> None:
    first, second = _run(W2, 1.0, 1000, 0.4, 0.1), _run(W2, 1.0, 1000, 0.8, None)
    second.sent = 1000
    both = combine([first, second])
    assert both.load_cpu_ms_per_request == 0.5  # (0.4 * 3000 + 0.8 * 1000) / 4000
    assert both.redis_cpu_ms_per_request == 0.1  # over the pass that read it


def test_each_pass_pair_gives_its_own_ratio_in_the_order_run() -> None:
    # The medians (1,400 and 1,853) hide that the box moved: 1.69x, then 1.32x, then 1.17x.
    ones = [_run(W1, 0.75, rps, 0.1, 0.04) for rps in (1269.4, 1399.5, 1466.7)]
    twos = [_run(W2, 0.9, rps, 0.1, 0.04) for rps in (2146.1, 1852.6, 1715.6)]
    one, two = combine(ones), combine(twos)
    assert one.rps_passes == [1269.4, 1399.5, 1466.7] and two.rps == 1852.6
    text = workers_bound(_results(one, two), "json-c64")
    assert "pass by pass (each pair back to back): 1.69x, 1.32x, 1.17x" in text
    # One pass, or passes that do not pair up: no per-pass ratios.
    assert "pass by pass" not in workers_bound(_results(ones[0], twos[0]), "json-c64")
    assert "pass by pass" not in workers_bound(_results(one, combine(twos[:2])), "json-c64")


def test_redis_cpu_is_read_from_a_real_server_and_none_without_one() -> None:
    host, port = require_redis().split("//")[1].split("/")[0].split(":")
    seconds = redis_cpu_seconds((host, int(port)))
    assert seconds is not None and seconds > 0
    assert redis_cpu_seconds(("127.0.0.1", 1)) is None
