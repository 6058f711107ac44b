"""Cross-request detectors: what changed between two requests of the same caller.

Used by lint (which has the bodies) and by anyone holding the previous request. Segments are
matched by name; only segments that were cacheable in both requests are compared.

- A segment that differs in a few short spans: each span is a volatile value (its kind is
  the detector's where one fired, else `changed_value`).
- A segment whose content is the same once keys are sorted (and JSON inside strings is
  parsed): non-deterministic serialisation, `reordered_json`.
- A system prompt changed beyond a few values while later messages are identical:
  request-specific content placed before shared content, `request_specific_prefix`.
- A message of the shared history rewritten beyond a few values: `edited_history`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.prefix.detectors import Finding, Severity
from gateway.prefix.segments import RequestSegments, Segment, SegmentKind, sorted_form

SMALL_SPAN = 80
MAX_SPANS = 4
MAX_CHANGED = 160
_DIFF_TOKENS = 20_000
TEXT_LIMIT = 200
_TOKENS = re.compile(r"\w+|\s+|[^\w\s]")
_HEADER_KINDS = {
    SegmentKind.TOOLS: "tools_changed",
    SegmentKind.SETTING: "setting_changed",
    SegmentKind.SCHEMA: "response_format_changed",
}


def diff_requests(
    previous: RequestSegments,
    current: RequestSegments,
    detector_hits: Mapping[str, Sequence[Finding]] | None = None,
) -> list[Finding]:
    """Return the findings that explain how `current` differs from `previous`."""
    hits = detector_hits or {}
    earlier = {s.name: (i, s) for i, s in enumerate(previous.segments)}
    findings: list[Finding] = []
    for index, segment in enumerate(current.segments[: current.stable_count]):
        found = earlier.get(segment.name)
        if found is None or found[0] >= previous.stable_count or found[1].digest == segment.digest:
            continue
        old = found[1]
        if segment.kind in _HEADER_KINDS:
            findings.extend(_header_change(old, segment, hits.get(segment.name, ())))
        elif _same_conversation(previous, current, index):
            later = _later_shared(previous, current, index)
            findings.extend(_content_change(old, segment, hits.get(segment.name, ()), later))
    return findings


def _header_change(old: Segment, new: Segment, hits: Sequence[Finding]) -> list[Finding]:
    if new.canonical and new.canonical == old.canonical:
        return [_span_finding(old.text, new.text, new.name, "reordered_json")]
    if new.kind is SegmentKind.SETTING:
        # Settings are a few bytes: show the whole new value, not a fragment of it.
        return [_finding(new.name, new.text, 0, len(new.text), "setting_changed")]
    spans = small_spans(old.text, new.text) or []
    # A tool whose description carries a changing timestamp: name the value, not the tool.
    volatile = [_classify_span(new, start, end, hits) for start, end in spans]
    if volatile and all(f.kind != "changed_value" for f in volatile):
        return volatile
    return [_span_finding(old.text, new.text, new.name, _HEADER_KINDS[new.kind])]


def _span_finding(old: str, new: str, name: str, kind: str) -> Finding:
    start, end = _middle(old, new)
    return _finding(name, new, start, end, kind)


def _finding(name: str, text: str, start: int, end: int, kind: str) -> Finding:
    """Return a confirmed finding; its text is cut at `TEXT_LIMIT`, its length is exact."""
    return Finding(name, start, end - start, kind, text[start:end][:TEXT_LIMIT], Severity.ERROR)


def _middle(old: str, new: str) -> tuple[int, int]:
    """Return the span of `new` left after trimming the prefix and suffix it shares with `old`."""
    limit = min(len(old), len(new))
    # Binary search on slice equality: the comparisons run in C, a char loop would not.
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if old[:middle] == new[:middle]:
            low = middle
        else:
            high = middle - 1
    prefix, low, high = low, 0, limit - low
    while low < high:
        middle = (low + high + 1) // 2
        if old[len(old) - middle :] == new[len(new) - middle :]:
            low = middle
        else:
            high = middle - 1
    return prefix, len(new) - low


def _content_change(
    old: Segment, new: Segment, hits: Sequence[Finding], later_shared: bool
) -> list[Finding]:
    if deep_canonical(old.data) == deep_canonical(new.data):
        return [_span_finding(old.text, new.text, new.name, "reordered_json")]
    spans = small_spans(old.text, new.text)
    if spans is not None:
        return [_classify_span(new, start, end, hits) for start, end in spans]
    start, end = _middle(old.text, new.text)
    if new.kind is SegmentKind.MESSAGE:
        kind = "edited_history"  # the conversation went on, so later messages match anyway
    else:
        kind = "request_specific_prefix" if later_shared else "system_changed"
    return [_finding(new.name, new.text, start, end, kind)]


def _classify_span(segment: Segment, start: int, end: int, hits: Sequence[Finding]) -> Finding:
    """Return the finding for a changed span, named after a detector hit that overlaps it."""
    for hit in hits:
        if hit.offset < end and start < hit.offset + hit.length:
            return Finding(segment.name, hit.offset, hit.length, hit.kind, hit.text, Severity.ERROR)
    return _finding(segment.name, segment.text, start, end, "changed_value")


def small_spans(old: str, new: str) -> list[tuple[int, int]] | None:
    """Return the changed spans of `new` when every change is short, else None."""
    start, end = _middle(old, new)
    old_end = len(old) - (len(new) - end)
    a = _TOKENS.findall(old[start:old_end])
    b = _TOKENS.findall(new[start:end])
    if len(a) > _DIFF_TOKENS or len(b) > _DIFF_TOKENS:
        return None
    offsets = [start]
    for token in b:
        offsets.append(offsets[-1] + len(token))
    old_offsets = [0]
    for token in a:
        old_offsets.append(old_offsets[-1] + len(token))
    spans: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        span = (offsets[j1], offsets[j2])
        if span[1] - span[0] > SMALL_SPAN or old_offsets[i2] - old_offsets[i1] > SMALL_SPAN:
            return None
        if spans and span[0] - spans[-1][1] <= 1:
            span = (spans.pop()[0], span[1])
        spans.append(span)
    # Many scattered edits are a different paragraph, not a few volatile values.
    if len(spans) > MAX_SPANS or sum(end - start for start, end in spans) > MAX_CHANGED:
        return None
    return spans


def deep_canonical(data: bytes) -> bytes:
    """Return JSON with sorted keys, where JSON held inside strings is canonical too."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data
    return sorted_form(_parse_nested(value))


def _parse_nested(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _parse_nested(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_parse_nested(v) for v in value]
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return _parse_nested(orjson.loads(value))
        except orjson.JSONDecodeError:
            return value
    return value


def _same_conversation(previous: RequestSegments, current: RequestSegments, index: int) -> bool:
    """Return whether two requests evidently share a conversation around segment `index`."""
    segment = current.segments[index]
    if segment.kind is not SegmentKind.MESSAGE:
        return True
    earlier = {s.name: s.digest for s in previous.segments[: previous.stable_count]}
    stable = current.segments[: current.stable_count]
    return any(
        s.kind is SegmentKind.MESSAGE and i != index and earlier.get(s.name) == s.digest
        for i, s in enumerate(stable)
    )


def _later_shared(previous: RequestSegments, current: RequestSegments, index: int) -> bool:
    earlier = {s.name: s.digest for s in previous.segments[: previous.stable_count]}
    return any(
        s.kind is SegmentKind.MESSAGE and earlier.get(s.name) == s.digest
        for s in current.segments[index + 1 : current.stable_count]
    )
