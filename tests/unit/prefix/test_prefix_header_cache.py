"""Header segments kept between requests give the segments computed afresh.

`_segment` shares one segment per absent header part and keeps a header's sorted-key
digest by the digest of its canonical bytes (an agent's tools repeat every step);
`build_record` takes a plain path for small requests. Each is checked against the
uncached computation (`_make_segment`, the chunked columns).
"""

from __future__ import annotations

from gateway.prefix import record as record_module
from gateway.prefix import segments
from gateway.prefix.cache_rules import rule_for
from gateway.prefix.record import build_record
from gateway.prefix.segments import SegmentKind, digest, sorted_form, split_request

TOOLS = [
    {"type": "function", "function": {"name": "b_lookup", "parameters": {"y": 1, "x": 2}}},
    {"type": "function", "function": {"name": "a_search", "parameters": {}}},
]


def _fresh(name: str, kind: SegmentKind, value: object) -> segments.Segment:
    segments._SORTED.clear()
    return segments._make_segment(name, kind, value)


def test_an_absent_header_is_one_shared_segment_equal_to_a_fresh_one() -> None:
    first = segments._segment("tools", SegmentKind.TOOLS, None)
    assert first is segments._segment("tools", SegmentKind.TOOLS, None)
    assert first == _fresh("tools", SegmentKind.TOOLS, None)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = split_request(body, rule_for("openai")).segments
    (system,) = [segment for segment in headers if segment.name == "system"]
    assert system.data == b"[]" and system.kind is SegmentKind.SYSTEM
    assert system.digest == digest(b"[]") and not system.breakpoint


def test_a_repeated_header_keeps_its_sorted_digest() -> None:
    fresh = _fresh("tools", SegmentKind.TOOLS, TOOLS)
    kept = segments._segment("tools", SegmentKind.TOOLS, TOOLS)
    again = segments._segment("tools", SegmentKind.TOOLS, [dict(t) for t in TOOLS])
    assert fresh == kept == again
    assert kept.canonical == digest(sorted_form(TOOLS, SegmentKind.TOOLS))
    # The same tools in another order: other bytes, the same sorted form.
    swapped = segments._segment("tools", SegmentKind.TOOLS, TOOLS[::-1])
    assert swapped.digest != kept.digest and swapped.canonical == kept.canonical
    # Other tools: another digest and another sorted form.
    other = [{"type": "function", "function": {"name": "c_other", "parameters": {}}}]
    assert segments._segment("tools", SegmentKind.TOOLS, other).canonical != kept.canonical


def test_a_marked_header_is_kept_by_its_stripped_bytes() -> None:
    marked = [{**TOOLS[0], "cache_control": {"type": "ephemeral"}}, TOOLS[1]]
    fresh = _fresh("tools", SegmentKind.TOOLS, marked)
    kept = segments._segment("tools", SegmentKind.TOOLS, marked)
    plain = segments._segment("tools", SegmentKind.TOOLS, TOOLS)
    assert kept == fresh and kept.breakpoint and not plain.breakpoint
    assert (kept.data, kept.canonical) == (plain.data, plain.canonical)


def test_small_and_chunked_records_are_equal() -> None:
    body = {
        "model": "m",
        "tools": TOOLS,
        "messages": [{"role": "system", "content": "rules"}]
        + [{"role": "user", "content": f"turn {i}"} for i in range(40)],
    }
    rule = rule_for("anthropic")
    request = split_request(body, rule)
    small = build_record(request, rule)
    original = record_module.SMALL_COLUMN
    record_module.SMALL_COLUMN = 0  # every column through the chunked path
    try:
        chunked = build_record(request, rule)
    finally:
        record_module.SMALL_COLUMN = original
    assert small == chunked and len(small.segment_names) == len(request.segments)
