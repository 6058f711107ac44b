"""The labelled corpus: every volatile span found, nothing else flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.prefix import LintReport, lint_conversation, lint_request, rule_for, split_request

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "prefix"
CASES = sorted(CORPUS.glob("*.json"))


def _load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data.pop("_label"), data


def _lint(label: dict[str, Any], data: dict[str, Any]) -> LintReport:
    family = label.get("family")
    if "requests" in data:
        return lint_conversation(data["requests"], family=family)
    return lint_request(data, family=family)


def test_corpus_is_big_enough_and_has_hard_negatives() -> None:
    labels = [_load(path)[0] for path in CASES]
    assert len(CASES) >= 25
    assert sum(1 for label in labels if not label["volatile"]) >= 8


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case_has_no_false_positives_and_no_misses(path: Path) -> None:
    label, data = _load(path)
    report = _lint(label, data)
    found = sorted((f.request, f.segment, f.kind, f.text) for f in report.findings)
    expected = sorted(
        (item.get("request", 0), item["segment"], item["kind"], item["text"])
        for item in label["volatile"]
    )
    assert found == expected, label["description"]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_offsets_point_at_the_reported_text(path: Path) -> None:
    label, data = _load(path)
    bodies = data.get("requests", [data])
    rule = rule_for(label.get("family") or "openai")
    for finding in _lint(label, data).findings:
        segments = split_request(bodies[finding.request], rule).segments
        text = next(s.text for s in segments if s.name == finding.segment)
        span = text[finding.offset : finding.offset + finding.length]
        assert span.startswith(finding.text)
