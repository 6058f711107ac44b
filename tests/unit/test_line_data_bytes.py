"""`replies.line_data` takes the data of a one-line event and leaves any other to `event_data`.

Its CR test is an int needle (`bytes in bytes` costs a raised TypeError on CPython 3.11);
an event with a CR anywhere, or any other shape, still gives None.
"""

from __future__ import annotations

import pytest

from gateway.upstream.replies import line_data
from gateway.upstream.sse import event_data


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
