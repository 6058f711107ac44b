from __future__ import annotations

import json

import pytest

from gateway.rawjson import RawJsonError, patch_object, scan_members

RAW = (
    b'{ "model" : "m",\n  "messages":[{"role":"user","content":"caf\xc3\xa9 \\u00e9 {\\"x\\": 1}"}],'
    b'\t"stream":true , "metadata":{"task_id":"t-1","team":"a"} }'
)


def test_no_edit_returns_the_same_bytes() -> None:
    assert patch_object(RAW) is RAW


def test_replace_keeps_every_other_byte() -> None:
    out = patch_object(RAW, {"model": "other"})
    assert out == RAW.replace(b'"model" : "m"', b'"model" : "other"')


def test_add_appends_before_the_closing_brace() -> None:
    out = patch_object(RAW, {"stream_options": {"include_usage": True}})
    assert out.startswith(RAW[: RAW.rindex(b"}")])
    assert json.loads(out)["stream_options"] == {"include_usage": True}
    assert list(json.loads(out)) == ["model", "messages", "stream", "metadata", "stream_options"]


@pytest.mark.parametrize("key", ["model", "messages", "stream", "metadata"])
def test_remove_any_position_leaves_valid_json_in_order(key: str) -> None:
    out = patch_object(RAW, remove=[key])
    data = json.loads(out)
    expected = [k for k in ["model", "messages", "stream", "metadata"] if k != key]
    assert list(data) == expected
    assert data == {k: v for k, v in json.loads(RAW).items() if k != key}


def test_messages_bytes_survive_any_edit() -> None:
    messages = RAW[RAW.index(b"[") : RAW.index(b"]") + 1]
    out = patch_object(RAW, {"model": "x", "max_tokens": 5}, remove=["metadata"])
    assert messages in out


def test_empty_object_and_single_member() -> None:
    assert patch_object(b"{}", {"a": 1}) == b'{"a":1}'
    assert patch_object(b'{"a":1}', remove=["a"]) == b"{}"


def test_scan_reports_spans() -> None:
    members, close = scan_members(RAW.decode())
    text = RAW.decode()
    assert [m.key for m in members] == ["model", "messages", "stream", "metadata"]
    assert text[members[0].value_start : members[0].end] == '"m"'
    assert text[close] == "}"


def test_not_an_object() -> None:
    with pytest.raises(RawJsonError):
        patch_object(b"[1, 2]", {"a": 1})
