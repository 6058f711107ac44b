"""`Pushes`: many callers' pushes laid out as one script call's words, read back exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.state.appending import Pushes

KEYS = st.lists(
    st.sampled_from(["task:a", "task:b", "caller:c", "caller:d"]),
    min_size=1,
    max_size=3,
    unique=True,
)
PUSHES = st.lists(st.tuples(KEYS, st.binary(max_size=8)), min_size=1, max_size=20)


def _read_back(words: tuple[Any, ...]) -> tuple[list[Any], list[tuple[list[Any], Any]]]:
    """The head and the pushes, read as the remember script reads them."""
    assert words[:2] == ("EVALSHA", "sha")
    count = words[2]
    keys, argv = list(words[3 : 3 + count]), list(words[3 + count :])
    head, at, pushes = argv[:2], 2, []
    while at < len(argv):
        n = argv[at]
        pushes.append(([keys[i - 1] for i in argv[at + 1 : at + 1 + n]], argv[at + 1 + n]))
        at += n + 2
    return head, pushes


@given(PUSHES)
def test_the_words_carry_every_push_in_order_to_its_own_keys(
    pushes: list[tuple[list[str], bytes]],
) -> None:
    laid = Pushes("sha", [4, 60])
    for keys, item in pushes:
        laid.add(keys, item)
    words = tuple(laid)
    head, read = _read_back(words)
    assert head == [4, 60] and read == pushes
    assert len(set(laid.keys)) == len(laid.keys)  # each key once, in the order first met
    assert laid.keys == list(dict.fromkeys(key for keys, _ in pushes for key in keys))
    assert laid.args() == list(words[3 + len(laid.keys) :])  # the call on its own, after NOSCRIPT
