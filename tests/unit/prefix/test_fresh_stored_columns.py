"""A large record's stored columns leave cyclic GC; the stored dict is otherwise the same."""

from __future__ import annotations

import gc
import json

import pytest

from gateway.prefix import PrefixChecker, PrefixRecord, locate, rule_for

COLUMNS = ("fingerprints", "segment_names", "segment_digests", "canonical_digests")


def _record(messages: int) -> PrefixRecord:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"turn {i}"} for i in range(messages)],
    }
    return PrefixChecker().check(body, rule_for("openai")).record


@pytest.mark.parametrize("messages", [1, 60, 61, 300])
def test_the_stored_dict_holds_the_records_columns(messages: int) -> None:
    record = _record(messages)
    stored = record.to_dict()
    for name in COLUMNS:
        assert stored[name] == list(getattr(record, name))
        assert type(stored[name]) is list
    assert stored["cumulative_tokens"] == list(record.cumulative_tokens)
    assert json.loads(json.dumps(stored)) == stored  # JSON-ready, as before
    again = PrefixRecord.from_dict(stored)
    assert again == record and again.fingerprints == record.fingerprints


@pytest.mark.skipif(not locate.NATIVE, reason="untracking needs the native _locate module")
def test_long_columns_are_out_of_cyclic_gc_and_short_ones_as_lists_are() -> None:
    stored = _record(300).to_dict()
    for name in (*COLUMNS, "cumulative_tokens"):
        assert not gc.is_tracked(stored[name])
    small = _record(1).to_dict()
    assert all(gc.is_tracked(small[name]) for name in COLUMNS)
