"""Volatile-content detectors: what they find, and what they cost on repeat."""

from __future__ import annotations

import base64
import random
import string
import uuid
from typing import Any

import orjson
import pytest

from gateway.prefix import PrefixChecker, ScanCache, rule_for, split_request
from gateway.prefix.detectors import (
    WINDOW_BYTES,
    ScanBudget,
    scan_bytes,
    scan_request,
    scan_segment,
    to_findings,
)
from gateway.prefix.patterns import Hit
from gateway.prefix.segments import Segment, SegmentKind, digest


def _kinds(text: str) -> list[tuple[str, str]]:
    data = orjson.dumps(text)
    return [(data[h.start : h.end].decode(), h.kind) for h in scan_bytes(data)]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("at 2026-03-12T14:03:07.123+01:00 ok", ("2026-03-12T14:03:07.123+01:00", "timestamp")),
        ("stamp 20260312T140307Z", ("20260312T140307Z", "timestamp")),
        ("on 12.03.2026 we", ("12.03.2026", "date")),
        ("on 3/4/2026 we", ("3/4/2026", "date")),
        ("the 12th of March 2026", ("12th of March 2026", "date")),
        ("Mar 12, 2026 10:15 AM PST", ("Mar 12, 2026 10:15 AM PST", "timestamp")),
        ("now=1773324187", ("1773324187", "epoch")),
        ('"created_at": 1773324187.25', ("1773324187.25", "epoch")),
        ("session_id=Kx8fQ2mZ7vLp", ("Kx8fQ2mZ7vLp", "request_id")),
        ("/v1/files/file-8fK2aQ9zT1xLm3BvQ", ("file-8fK2aQ9zT1xLm3BvQ", "request_id")),
        (
            "run-3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b",
            ("3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b", "uuid"),
        ),
    ],
)
def test_detects(text: str, found: tuple[str, str]) -> None:
    assert _kinds(text) == [found]


@pytest.mark.parametrize(
    "text",
    [
        "build 1773324187 objects",  # a 10-digit count, no time word near it
        "version 2.14.4 and v1.2.3-beta.1",
        "call +1 (415) 555-0132 or 415-555-0132",
        "the year 2024 and 2024-2025 season",
        "mask 0xDEADBEEFCAFEBABE1234 color #ff00aa",
        "aspect 16:9 and score 3:16",
        "12/34/2026 is not a date",
        "HTTPConnectionPool2Manager and test_parse_iso8601_dates",
        "Qwen/Qwen3-VL-8B-Instruct and gpt-4o-2024-08-06",
        "commit a1b2c3d in the log",
    ],
)
def test_does_not_flag(text: str) -> None:
    assert _kinds(text) == []


def test_recall_on_random_ids_is_high() -> None:
    rng = random.Random(42)
    alphabet = string.ascii_letters + string.digits
    makers = {
        "uuid": lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "hex": lambda: f"{rng.getrandbits(128):032x}",
        "base64": lambda: base64.b64encode(rng.randbytes(18)).decode(),
        "request_id": lambda: "req_" + "".join(rng.choice(alphabet) for _ in range(20)),
    }
    for kind, make in makers.items():
        hits = sum(
            _kinds(f"value {token} here") == [(token, kind)]
            for token in (make() for _ in range(300))
        )
        assert hits / 300 >= 0.85, kind


def _segment(text: str, name: str = "system") -> Segment:
    data = orjson.dumps(text)
    return Segment(name, SegmentKind.SYSTEM, data, digest(data))


def test_segment_hits_are_cached_by_digest() -> None:
    cache = ScanCache()
    segment = _segment("Now: 2026-03-12T14:03:07Z " + "filler " * 50)
    first = scan_segment(segment, cache, ScanBudget())
    assert first and len(cache) == 1
    assert scan_segment(segment, cache, ScanBudget(0)) == first  # no budget needed on a hit


def test_large_segments_are_scanned_in_windows_without_losing_boundary_hits() -> None:
    filler = "lorem ipsum dolor " * (WINDOW_BYTES // 18)
    boundary = WINDOW_BYTES - len('"') - 10  # a UUID straddling the first window edge
    text = filler[:boundary] + " 3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b " + filler
    segment = _segment(text)
    hits = scan_segment(segment, ScanCache(), ScanBudget())
    assert hits is not None
    assert [h.kind for h in hits] == ["uuid"]


def test_a_changed_window_is_the_only_one_rescanned() -> None:
    cache = ScanCache()
    tail = "plain words " * (3 * WINDOW_BYTES // 12)
    scan_segment(_segment("At 2026-03-12T14:03:07Z. " + tail), cache, ScanBudget())
    budget = ScanBudget(2 * WINDOW_BYTES)
    hits = scan_segment(_segment("At 2026-03-12T14:05:00Z. " + tail), cache, budget)
    assert hits is not None and [h.kind for h in hits] == ["timestamp"]
    assert budget.remaining is not None and budget.remaining >= 0


def test_budget_leaves_segments_unscanned_and_later_requests_catch_up() -> None:
    rule = rule_for("openai")
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Now 2026-03-12T14:03:07Z " + "x " * 40_000},
            {"role": "user", "content": "hi"},
        ],
    }
    request = split_request(body, rule)
    cache = ScanCache()
    findings, unscanned = scan_request(request, cache, ScanBudget(16 * 1024))
    assert unscanned == ["system"] and findings == []
    for _ in range(2):  # one 32 KiB window per request, even over a smaller budget
        findings, unscanned = scan_request(request, cache, ScanBudget(16 * 1024))
    assert unscanned == [] and [f.kind for f in findings] == ["timestamp"]


def test_offsets_are_characters_not_bytes() -> None:
    segment = _segment("Café résumé — généré le 2026-03-12")
    hits = scan_segment(segment, ScanCache(), ScanBudget())
    assert hits is not None
    [finding] = to_findings(segment, hits)
    assert segment.text[finding.offset : finding.offset + finding.length] == "2026-03-12"


def test_the_newest_turn_is_not_scanned() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "stable"},
            {
                "role": "user",
                "content": "2026-03-12T14:03:07Z and 3f2b8c1e-9d4a-4e7b-8a6f-1c2d3e4f5a6b",
            },
        ],
    }
    assert PrefixChecker().check(body, rule_for("openai")).findings == ()


def test_replayed_segments_are_not_rescanned_or_reported() -> None:
    rule = rule_for("openai")
    checker = PrefixChecker()
    first: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Agent. Started 2026-03-12T14:03:07Z."},
            {"role": "user", "content": "go"},
        ],
    }
    one = checker.check(first, rule)
    assert [f.kind for f in one.findings] == ["timestamp"]
    second = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "next"},
        ],
    }
    two = checker.check(second, rule, [one.record])
    assert two.findings == () and two.divergence is None


@pytest.mark.parametrize("seed", range(20))
def test_looking_many_up_at_once_is_looking_each_up(seed: int) -> None:
    """Same answers, and the same least-recently-used order left behind (evictions)."""
    rng = random.Random(seed)
    stored = [bytes([i]) for i in range(12)]
    asked = [rng.choice([*stored, b"missing", b"other"]) for _ in range(rng.randrange(30))]
    one, many = ScanCache(max_entries=10), ScanCache(max_entries=10)
    for cache in (one, many):
        for key in stored:
            cache.put(key, () if key[0] % 2 else (Hit(0, 1, "x"),))
    assert many.get_many(asked) == [one.get(key) for key in asked]
    assert list(many._entries) == list(one._entries)
    one.put(b"new", ())
    many.put(b"new", ())
    assert list(many._entries) == list(one._entries)  # the same one evicted
