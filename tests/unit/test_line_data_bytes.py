"""`replies.line_data` and `sse.simple_data` take the data of a one-line event (and
`simple_data` of a named one) and leave any other to `event_data`.

Its CR test is an int needle (`bytes in bytes` costs a raised TypeError on CPython 3.11);
an event with a CR anywhere, or any other shape, still gives None.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream.replies import line_data
from gateway.upstream.sse import event_data, joined_data, simple_data


@pytest.mark.parametrize("data", [b'{"a":1}', b"[DONE]", b"", b"x y"])
def test_a_one_line_event_gives_what_event_data_gives(data: bytes) -> None:
    event = b"data: " + data + b"\n\n"
    assert line_data(event) == data == event_data(event)


@pytest.mark.parametrize(
    "event",
    [
        b'data: {"a":1}\r\n\r\n',
        b'data: {"a":\r1}\n\n',
        b"data: a\ndata: b\n\n",
        b": comment\n\n",
        b'data: {"a":1}\n',
        b'event: x\ndata: {"a":1}\n\n',
    ],
)
def test_any_other_event_is_left_to_event_data(event: bytes) -> None:
    assert line_data(event) is None


@pytest.mark.parametrize("data", [b'{"a":1}', b"[DONE]", b"", b"x y", b" {}"])
@pytest.mark.parametrize("name", [None, b"content_block_delta", b""])
def test_a_named_or_plain_one_line_event_gives_what_event_data_gives(
    data: bytes, name: bytes | None
) -> None:
    event = (b"event: " + name + b"\n" if name is not None else b"") + b"data: " + data + b"\n\n"
    assert simple_data(event) == data == joined_data(event) == event_data(event)


@pytest.mark.parametrize(
    "event",
    [
        b'event: x\r\ndata: {"a":1}\r\n\r\n',
        b'event: x\ndata: {"a":\r1}\n\n',
        b"event: x\ndata: a\ndata: b\n\n",
        b"event: x\n\n",
        b"event: x\nid: 3\ndata: {}\n\n",
        b'event: x\ndata:{"a":1}\n\n',
        b": comment\n\n",
        b'event: x\ndata: {"a":1}\n',
        b"",
    ],
)
def test_simple_data_leaves_any_other_event_to_event_data(event: bytes) -> None:
    assert simple_data(event) is None


@given(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=12)))
def test_simple_data_never_disagrees_with_event_data(data: bytes, name: bytes | None) -> None:
    for event in (
        data,
        b"data: " + data + b"\n\n",
        b"event: " + (name or b"") + b"\ndata: " + data + b"\n\n",
    ):
        simple = simple_data(event)
        assert simple is None or simple == joined_data(event)
