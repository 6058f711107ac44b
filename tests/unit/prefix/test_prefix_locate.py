"""The native locator finds the same hits as Python's regex alone, only faster.

The tests compare `locate.matches` (native candidates, regex confirmation) with the plain
`CANDIDATES.finditer` on the same bytes, bounds and context: the matches must be the same
but for bare numbers (which the locator skips because `classify` rejects them), and the
hits of `scan_bytes` must be identical, so the two can never drift apart.
"""

from __future__ import annotations

import base64
import os
import random
import re
from pathlib import Path

import orjson
import pytest

from gateway.prefix import locate, rule_for, split_request
from gateway.prefix.detectors import ScanBudget, ScanCache, scan_bytes, scan_request
from gateway.prefix.patterns import CANDIDATES

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "prefix"

needs_native = pytest.mark.skipif(
    not locate.NATIVE and not os.environ.get("CI"),
    reason="the native locator was not built (no C compiler); CI requires it",
)

# Pieces that exercise every branch of the pattern, and near misses of each.
_PIECES = [
    b"2026-03-12T14:00:00Z",
    b"2026-13-45",
    b"1712345678",
    b"1712345678901",
    b"171234567",
    b"Monday, 12 March 2026",
    b"12 Monkeys",
    b"550e8400-e29b-41d4-a716-446655440000",
    b"req_8fK2mQ9xLp3Z",
    b"abcdefghijklmnop7",
    b"abcdefghijk7",
    b"12/03/2026",
    b"12/03/1899",
    b"3rd of May 2026",
    b"March 12, 2026",
    b"20260312T140000Z",
    b"2026/3/12",
    b"12.03.2026",
    b"45.21",
    b"4th, 2026",
    b"1:23:45",
    b"123:45:67",
    b"12 of June",
    b"v1.2.3",
    b"0x1f2e3d4c",
    b"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    b"\\n2026-03-12",
    b"request_id: 48213377",
    b"session key=9921003417",
    b" 48213377123 ",
    b"ID 4821337",
    b'{"tool_call_id":"call_1","content":"[[48213377123, 7712345',
    b'trace-id = "48213377"',
    b"[1712345678901, 1234567890123]",
    b'"created_at": 1712345678',
    b"ts=1712345678.25",
    b"1712345678901.129612/03/1899",
    b"\xc3\xa9t\xc3\xa9 2026",
    b"\xff\xfe12:00:00",
]
_ALPHABET = b"0123456789" * 3 + b"abcXYZ_-/.:=+ T,\\n\xc3\xa9\xffstndrhoJMFASOND"


def _reference(data: bytes, start: int, stop: int, limit: int) -> list[tuple[int, int]]:
    spans = []
    for match in CANDIDATES.finditer(data, start, limit):
        if match.start() >= stop:
            break
        spans.append(match.span())
    return spans


def _located(data: bytes, start: int, stop: int, limit: int) -> list[tuple[int, int]]:
    return [match.span() for match in locate.matches(data, start, stop, limit)]


_TOKEN = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_+/=-")


def _bare_number(data: bytes, span: tuple[int, int], limit: int) -> bool:
    """The spec of `bare_number` in _locate.c: matches the locator may skip."""
    start = span[0]
    run = re.match(rb"[0-9]*", data[start:limit])
    number = run.group() if run else b""
    end = start + len(number)
    return (
        len(number) >= 7
        and (start == 0 or data[start - 1] not in _TOKEN)
        and (end == limit or data[end] not in _TOKEN)
        and not (_epoch_shaped(number) and data[end : end + 1] == b"." and end < limit)
        and not (_epoch_shaped(number) and _TIME_WORD.search(data[max(start - 32, 0) : start]))
        and (_epoch_shaped(number) or not _ID_WORD.search(data[max(start - 48, 0) : start]))
    )


_TIME_WORD = re.compile(rb"at|time|now|epoch|modified|issued|since|until|ts|nbf|exp", re.I)
_ID_WORD = re.compile(rb"(?:id|key)[\"'\\ \t\n\r\f\v:=]*$", re.I)


def _epoch_shaped(number: bytes) -> bool:
    return number[:1] == b"1" and len(number) in (10, 13)


def _same(data: bytes, start: int, stop: int, limit: int) -> None:
    """Assert the locator's matches and hits against Python's regex alone."""
    expected = [s for s in _reference(data, start, stop, limit) if not _bare_number(data, s, limit)]
    assert _located(data, start, stop, limit) == expected, data
    native = scan_bytes(data[:limit], start, stop)
    assert native == scan_bytes(data[:limit], start, stop, native=False), data


def _random_text(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randint(1, 30)):
        if rng.random() < 0.3:
            parts.append(rng.choice(_PIECES))
        else:
            parts.append(bytes(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 14))))
    return b"".join(parts)


@needs_native
def test_the_native_locator_is_built_in_ci() -> None:
    # In CI a silent fallback to pure Python would hide a broken build (and a 10-30x
    # slower scan), so its absence fails here rather than skipping.
    assert locate.NATIVE


@needs_native
def test_random_text_gives_the_same_matches_as_the_regex() -> None:
    rng = random.Random(20261129)
    for _ in range(5000):
        data = _random_text(rng)
        start = rng.randint(0, len(data))
        stop = rng.randint(start, len(data))
        limit = rng.randint(stop, len(data))
        _same(data, start, stop, limit)


@needs_native
@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_corpus_requests_give_the_same_matches_as_the_regex(path: Path) -> None:
    data = path.read_bytes()
    _same(data, 0, len(data), len(data))


@needs_native
def test_dense_content_gives_the_same_matches_as_the_regex() -> None:
    rng = random.Random(7)
    logs = b"\\n".join(
        f"2026-03-{rng.randint(1, 28):02d}T12:{rng.randint(0, 59):02d}:00Z worker-{n} id {n}".encode()
        for n in range(2000)
    )
    numbers = b", ".join(
        str(rng.randint(0, 10 ** rng.randint(1, 13))).encode() for _ in range(5000)
    )
    hexes = b" ".join(rng.randbytes(16).hex().encode() for _ in range(2000))
    blob = base64.b64encode(rng.randbytes(50_000))
    ids = b" ".join(b"request_id: %d" % rng.randint(10**6, 10**12) for _ in range(500))
    for data in (logs, numbers, hexes, blob, ids, b"1" * 5000, b"a1" * 5000):
        _same(data, 0, len(data), len(data))


@needs_native
def test_lookbehind_reaches_before_the_start_as_the_regex_does() -> None:
    data = b"xx abcdefghijklmnop7 yy"
    start = data.index(b"7")  # twelve token characters sit before the start position
    assert _located(data, start, len(data), len(data)) == [(start, start + 1)]
    assert _reference(data, start, len(data), len(data)) == [(start, start + 1)]


@needs_native
def test_nothing_is_read_past_the_limit() -> None:
    data = b"on 2026-03-12 at 12:30:45"
    limit = data.index(b"-03")  # the date's month lies beyond what the scan may read
    assert _located(data, 0, limit, limit) == _reference(data, 0, limit, limit) == []


@needs_native
def test_flag_candidates_names_the_buffers_that_could_match() -> None:
    buffers = [b"plain words", b"at 2026-03-12", bytearray(b"x 12:30:45 y"), memoryview(b"no")]
    assert locate.flag_candidates(buffers) == [1, 2]
    assert locate.flag_candidates([]) == []


@needs_native
def test_bad_arguments_raise_type_errors_not_crashes() -> None:
    from gateway.prefix import _locate  # type: ignore[attr-defined]

    with pytest.raises(TypeError):
        _locate.flag_candidates([1])
    with pytest.raises(TypeError):
        _locate.flag_candidates(5)
    with pytest.raises(TypeError):
        _locate.next_candidate("text", 0, 4, 4)
    # Out-of-range bounds are clamped to the buffer, never read past it.
    assert _locate.next_candidate(b"12:30:45", -5, 10**9, 10**9) == 0
    assert _locate.next_candidate(b"12:30:45", 7, 3, 3) == -1


def test_without_the_native_locator_the_regex_runs_everywhere() -> None:
    data = b"at 2026-03-12T14:00:00Z and 1712345678 then 12 of June 2026"
    spans = [m.span() for m in locate.matches(data, 0, len(data), len(data), native=False)]
    assert spans == _reference(data, 0, len(data), len(data))
    assert len(spans) == 3


def test_dense_matches_use_up_the_scan_budget() -> None:
    # A megabyte dense with ids is the costly case: each match is charged, so the
    # request stops early and leaves the rest to later requests.
    rng = random.Random(3)
    messages = [
        {"role": "user", "content": " ".join(f"req_{rng.randbytes(9).hex()}" for _ in range(400))}
        for _ in range(20)
    ]
    body = {"model": "m", "messages": [*messages, {"role": "user", "content": "hi"}]}
    request = split_request(orjson.loads(orjson.dumps(body)), rule_for("openai"))
    budget = ScanBudget(256 * 1024)  # 220 KiB of text, but 400 matches in the first message
    findings, unscanned = scan_request(request, ScanCache(), budget)
    assert budget.exhausted
    assert {f.segment for f in findings} == {"messages[0]"}
    assert unscanned == [f"messages[{i}]" for i in range(1, 20)]


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_scan_request_finds_the_same_with_or_without_the_locator(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = orjson.loads(path.read_bytes())
    label = case.pop("_label", {})
    rule = rule_for(label.get("family", "openai"))
    requests = [split_request(body, rule) for body in case.get("requests", [case])]
    native = [scan_request(request, ScanCache()) for request in requests]
    monkeypatch.setattr(locate, "_native", None)
    monkeypatch.setattr(locate, "_flag", None)
    assert [scan_request(request, ScanCache()) for request in requests] == native
    if "requests" not in case:  # a single request: its volatile spans are found by the scan
        assert any(findings for findings, _ in native) == bool(label.get("volatile"))


@needs_native
def test_any_byte_values_around_digits_are_handled() -> None:
    # The locator skips eight bytes at a time when none is a digit: every byte value
    # next to a digit, at every offset in the word, must still be seen.
    rng = random.Random(99)
    for _ in range(2000):
        noise = bytearray(rng.randbytes(rng.randint(1, 40)))
        at = rng.randrange(len(noise) + 1)
        data = bytes(noise[:at]) + rng.choice(_PIECES) + bytes(noise[at:])
        _same(data, 0, len(data), len(data))
