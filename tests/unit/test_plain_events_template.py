"""`PlainEvents().read` (gateway/upstream/_plain_event.c): one stream's chunks read by
their content when the rest of their bytes is the last plain chunk's, against
`plain_event` of each: the same answer for every event, in every order."""

from __future__ import annotations

import random

import orjson
import pytest

native = pytest.importorskip("gateway.upstream._plain_event")
if not hasattr(native, "PlainEvents"):
    pytest.skip("built before PlainEvents", allow_module_level=True)

PIECES = [
    "a", " ", '"', "\\", '\\"', "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "é", "😀", "\n",
    "\t", "\x01", "\\n", "/", "\\/", "}", "]", ",", "\\x", "\\u12", "\xff",
]  # fmt: skip


def _event(
    rnd: random.Random, ids: int, tiers: list[str | None], extras: list[str | None]
) -> bytes:
    chunk: dict[str, object] = {"id": f"chatcmpl-{rnd.randrange(ids)}", "created": 1, "model": "m"}
    tier = rnd.choice(tiers)
    if tier is not None:
        chunk["service_tier"] = tier
    choice = {"index": 0, "delta": {"content": "CONTENT"}, "logprobs": None, "finish_reason": None}
    chunk["choices"] = [choice]
    extra = rnd.choice(extras)
    if extra is not None:
        chunk["obfuscation"] = extra
    text = "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 6)))
    raw = text.encode("utf-8", "surrogatepass")
    if rnd.random() < 0.1:
        raw = bytes(rnd.randrange(256) for _ in range(3))
    event = (b"data: " + orjson.dumps(chunk) + b"\n\n").replace(b"CONTENT", raw)
    edit = rnd.random()
    if edit < 0.05:
        event = event.replace(b'"finish_reason":null', b'"finish_reason":"stop"')
    elif edit < 0.1:
        event = event[:-1]
    elif edit < 0.15:
        at = rnd.randrange(len(event))
        event = event[:at] + bytes([rnd.randrange(256)]) + event[at + 1 :]
    elif edit < 0.2:
        event = event.replace(b'"content":', b'"role":"assistant","content":')
    elif edit < 0.22:
        event = event.replace(b'"content":"', b'"content":3,"x":"')
    return event


@pytest.mark.parametrize(
    ("ids", "tiers", "extras"),
    [
        (1, ["default"], [None]),
        (1, [None], [None, "q"]),
        (4, [None, "default", "flex"], [None, "zz"]),
    ],
)
@pytest.mark.parametrize("seed", range(4))
def test_a_streams_reader_answers_as_plain_event(
    ids: int, tiers: list[str | None], extras: list[str | None], seed: int
) -> None:
    rnd = random.Random(seed)
    for _ in range(500):
        read = native.PlainEvents().read
        for _ in range(rnd.randint(1, 30)):
            event = _event(rnd, ids, tiers, extras)
            assert read(event) == native.plain_event(event), event


def test_a_reader_takes_bytes_alone() -> None:
    read = native.PlainEvents().read
    event = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    assert read(event) == ("a", None)
    assert read(bytearray(event)) is None
    assert read(event.replace(b'"a"', b'"b"')) == ("b", None)
