"""A fresh prompt's repeated segments answered from the closest request's clean run.

`CleanRuns` lets the scan skip the cache lookups of segments that repeat, at the same
positions, a run the closest earlier request scanned whole and found clean. Its answers
must be the scan cache's: checks with it equal checks without it, for any series.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import PrefixChecker, PrefixRecord, rule_for
from gateway.prefix.checker import repaired_match
from gateway.prefix.clean_runs import MIN_RUN, CleanRuns
from gateway.prefix.detectors import ScanCache
from gateway.prefix.record import chain_fingerprints

RULE = rule_for("openai")
# Message contents: plain prose, and values the scan reports (a timestamp, a uuid).
CONTENTS = [
    "read the module and fix the failing test",
    "def step(x):\n    return x * 2  # keep",
    "deployed at 2026-03-12T14:03:07Z by the release job",
    "request 3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b failed; retry it",
    "the plan: profile, cut, measure again",
]
SYSTEMS = ["You are a coding agent.", "You are a coding agent. Session 2026-03-12T14:03:07Z."]


def _body(system: str, contents: list[str], last: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}]
    messages += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"}
        for i, text in enumerate(contents)
    ]
    messages.append({"role": "user", "content": last})
    return {"model": "bench-gpt", "messages": messages}


def _history(count: int) -> list[str]:
    return [CONTENTS[i % 2] for i in range(count)]  # clean: prose and code only


def _run(checker: PrefixChecker, bodies: list[dict[str, Any]]) -> list[Any]:
    records: list[PrefixRecord] = []
    checks = []
    for body in bodies:
        raw = orjson.dumps(body)
        check = checker.check(body, RULE, records, raw=raw)
        checks.append(check)
        records = [check.record, *records[:3]]
    return checks


def _repeated(runs: CleanRuns, record: PrefixRecord, closest: PrefixRecord, matched: int) -> range:
    """What `PrefixChecker` skips: `record`'s segments after the break that repeat
    `closest`'s clean run."""
    run = runs.run_of(closest)
    if not run:
        return range(0)
    return range(
        max(matched + 1, run.start), min(run.stop, repaired_match(record, closest, matched))
    )


EDIT = st.tuples(
    st.sampled_from(["system", "edit", "append", "drop", "same"]),
    st.integers(0, 200),
    st.sampled_from(range(len(CONTENTS))),
)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(MIN_RUN - 2, MIN_RUN + 40),
    edits=st.lists(EDIT, min_size=2, max_size=6),
    budget=st.sampled_from([None, 2 * 1024 * 1024, 256]),
)
def test_checks_with_clean_runs_equal_checks_without(
    count: int, edits: list[tuple[str, int, int]], budget: int | None
) -> None:
    contents, system, bodies = _history(count), SYSTEMS[0], []
    for step, (kind, at, which) in enumerate(edits):
        if kind == "system":  # a fresh prompt: the rest repeats
            system = f"You are a coding agent. Session {step}."
        elif kind == "edit" and contents:
            contents[at % len(contents)] = CONTENTS[which]
        elif kind == "append":
            contents += [CONTENTS[which], CONTENTS[0]]
        elif kind == "drop" and contents:
            del contents[at % len(contents)]
        bodies.append(_body(system, list(contents), f"step {step}"))
    with_runs = PrefixChecker(scan_budget=budget)
    without = PrefixChecker(scan_budget=budget)
    without.clean_runs = CleanRuns(max_records=0)  # keeps nothing: every segment looked up
    assert _run(with_runs, bodies) == _run(without, bodies)


def test_a_fresh_prompt_looks_up_only_its_new_segments() -> None:
    cache = ScanCache()
    looked: list[int] = []
    get_many = cache.get_many
    cache.get_many = lambda keys: looked.append(len(keys)) or get_many(keys)  # type: ignore[method-assign]
    checker = PrefixChecker(cache=cache)
    assert checker.cache is cache  # an empty cache is falsy: it was replaced by a new one
    contents = _history(200)
    bodies = [_body(f"Session {i}.", contents, f"step {i}") for i in range(3)]
    first, second, third = _run(checker, bodies)
    assert first.findings == second.findings == third.findings == ()
    assert second.divergence is not None and second.divergence.segment == "system"
    # The first looks up every cacheable segment; the next ones only their system prompt
    # (the break), their repeated messages being the previous request's clean run.
    assert looked == [first.record.stable_count, 1, 1]
    assert len(checker.clean_runs) == 3


def test_a_run_with_a_finding_or_left_unscanned_is_not_kept() -> None:
    contents = _history(100)
    contents[50] = CONTENTS[2]  # a timestamp in the history: a finding
    checker = PrefixChecker()
    _run(checker, [_body(f"Session {i}.", contents, "go") for i in range(3)])
    assert len(checker.clean_runs) == 0
    starved = PrefixChecker(scan_budget=1)
    checks = _run(starved, [_body("Session 0.", _history(100), "go")])
    assert checks[0].unscanned and len(starved.clean_runs) == 0


def test_a_record_rebuilt_from_the_store_finds_its_run() -> None:
    checker = PrefixChecker()
    body = _body("Session 0.", _history(100), "go")
    first = checker.check(body, RULE, [], raw=orjson.dumps(body))
    stored = PrefixRecord.from_dict(orjson.loads(orjson.dumps(first.record.to_dict())))
    assert stored.segment_digests is not first.record.segment_digests
    later = _body("Session 1.", _history(100), "go on")
    check = checker.check(later, RULE, [stored], raw=orjson.dumps(later))
    found = _repeated(checker.clean_runs, check.record, stored, check.divergence.index)
    assert found == range(check.divergence.index + 1, stored.stable_count)


def test_the_run_ends_at_the_first_changed_segment() -> None:
    checker = PrefixChecker()
    contents = _history(100)
    first = _run(checker, [_body("Session 0.", contents, "go")])[0]
    contents[70] = "an edited answer"
    body = _body("Session 1.", contents, "go")
    second = checker.check(body, RULE, [first.record], raw=orjson.dumps(body))
    changed = second.record.segment_names.index("messages[71]")
    assert _repeated(checker.clean_runs, second.record, first.record, 1) == range(2, changed)


def test_runs_are_bounded_in_records_and_segments() -> None:
    records = [
        PrefixChecker().check(_body(f"Session {i}.", _history(100), "go"), RULE).record
        for i in range(5)
    ]
    runs = CleanRuns(max_records=3, max_segments=10_000)
    for record in records:
        runs.keep(record, 1, record.stable_count)
    assert len(runs) == 3
    assert _repeated(runs, records[1], records[0], 1) == range(0)  # the oldest, evicted
    assert _repeated(runs, records[1], records[4], 1) != range(0)
    small = CleanRuns(max_segments=2 * len(records[0].segment_digests))
    for record in records:
        small.keep(record, 1, record.stable_count)
    assert len(small) == 2
    short = CleanRuns()
    short.keep(records[0], 1, MIN_RUN)  # shorter than MIN_RUN: not worth keeping
    assert len(short) == 0


def test_a_record_alike_in_its_key_does_not_take_anothers_run() -> None:
    contents = _history(100)
    kept = PrefixChecker().check(_body("Session 0.", contents, "go"), RULE).record
    contents[10] = "an edited answer"  # neither the header, the middle nor the last
    other = PrefixChecker().check(_body("Session 0.", contents, "go"), RULE).record
    runs = CleanRuns()
    runs.keep(kept, 1, kept.stable_count)
    assert _repeated(runs, other, other, 1) == range(0)
    assert _repeated(runs, other, kept, 1) == range(2, other.segment_names.index("messages[11]"))


def test_a_fresh_prompts_chain_is_left_to_its_first_reader() -> None:
    checker = PrefixChecker()
    first = _run(checker, [_body("Session 0.", _history(100), "go")])[0]
    stored = PrefixRecord.from_dict(first.record.to_dict())  # as the store hands it back
    body = _body("Session 1.", _history(100), "go")
    check = checker.check(body, RULE, [stored], raw=orjson.dumps(body))
    assert check.divergence is not None and check.divergence.segment == "system"
    assert not check.record._chain  # one segment shared of 105: not hashed before the call
    whole = chain_fingerprints("openai", "bench-gpt", check.record.segment_digests)
    assert check.record.to_dict()["fingerprints"] == list(whole)
    assert check.record.fingerprints[:1] == stored.fingerprints[:1]
