"""The canonical walk over long strings: 16 bytes at a step, escapes across the steps.

`_locate.canonical_items` checks a string 16 bytes at a time, with a shortcut for blocks
without a backslash; an escape may start in one block and end in the next. Strings here are
long (tens of bytes, mostly plain letters) so that quotes, backslashes and escapes land at
every offset of a block, in each way clients write JSON.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import locate

_NATIVE = locate.native_step("canonical_items")
pytestmark = pytest.mark.skipif(_NATIVE is None, reason="needs the native _locate module")

# Mostly plain letters, so escapes fall anywhere in a block, not in every byte of it.
LONG_TEXT = st.text(
    alphabet=st.sampled_from('aaaaaaaaaab"\\/\n\t\r\x08\x0c\x01\x1fé€😀\u2028'),
    min_size=10,
    max_size=150,
)
STYLES = [
    orjson.dumps,
    lambda value: json.dumps(value).encode(),
    lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(),
]


def _items(raw: bytes) -> tuple[list[bytes | None], bytes]:
    assert _NATIVE is not None
    found = _NATIVE(raw, 0)
    assert found is not None
    return found  # type: ignore[no-any-return]


def _messages(texts: list[str]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text} for text in texts]


@settings(max_examples=500, deadline=None)
@given(texts=st.lists(LONG_TEXT, min_size=1, max_size=6), style=st.sampled_from(range(3)))
def test_an_item_taken_from_long_strings_is_orjsons_dump(texts: list[str], style: int) -> None:
    messages = _messages(texts)
    raw = STYLES[style](messages)
    items, _ = _items(raw)
    assert len(items) == len(messages)
    for item, message in zip(items, messages, strict=True):
        assert item is None or item == orjson.dumps(message)


@settings(max_examples=500, deadline=None)
@given(texts=st.lists(LONG_TEXT, min_size=1, max_size=6))
def test_orjsons_own_long_strings_are_taken_whole(texts: list[str]) -> None:
    messages = _messages(texts)
    items, _ = _items(orjson.dumps(messages))
    assert items == [orjson.dumps(message) for message in messages]


@pytest.mark.parametrize("offset", range(40))
def test_an_escape_across_two_blocks_is_read_as_one(offset: int) -> None:
    """A backslash as a block's last byte escapes the next block's first."""
    for escape in ('\\"', "\\\\", "\\n", "\\u001f"):
        raw = b'[{"c":"' + b"a" * offset + escape.encode() + b"a" * 20 + b'"}]'
        items, _ = _items(raw)
        assert items == [orjson.dumps(orjson.loads(raw)[0])]
    refused = b'[{"c":"' + b"a" * offset + b"\\u0041" + b"a" * 20 + b'"}]'  # orjson: "A"
    assert _items(refused)[0] == [None]
