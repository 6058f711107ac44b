"""`Pushes` and `Gathered`: many callers' writes laid out as one script call's words, read
back exactly; `Parts`: each caller answered with its own part of the one reply."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.state.appending import Gathered, Parts, Pushes

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


# Callers of a gathering call: each its keys (a task named twice is two additions), and
# three args a key, as the task-cost script reads them.
CALLERS = st.lists(
    st.lists(st.sampled_from(["task:a", "task:b", "task:c"]), min_size=1, max_size=3),
    min_size=1,
    max_size=20,
)


@given(CALLERS)
def test_gathered_words_carry_each_callers_keys_and_args_in_order(
    callers: list[list[str]],
) -> None:
    laid = Gathered("sha", [])
    for n, keys in enumerate(callers):
        laid.add(keys, [arg for at in range(len(keys)) for arg in (n, at, 60)])
    words = tuple(laid)
    assert words[:2] == ("EVALSHA", "sha")
    count = words[2]
    keys, argv = list(words[3 : 3 + count]), list(words[3 + count :])
    assert keys == [key for caller in callers for key in caller]
    # The script's key i has args 3(i-1)+1 .. 3i: its caller's, in its caller's order.
    owners = [(n, at) for n, caller in enumerate(callers) for at in range(len(caller))]
    assert [tuple(argv[3 * i : 3 * i + 2]) for i in range(count)] == owners
    assert laid.args() == argv  # the call on its own, after NOSCRIPT


@given(CALLERS, st.sets(st.integers(min_value=0, max_value=19)))
def test_each_caller_is_answered_with_its_own_keys_values(
    callers: list[list[str]], quitters: set[int]
) -> None:
    loop = asyncio.new_event_loop()
    try:
        futures = [loop.create_future() for _ in callers]
        gathered = Gathered("sha", [])
        gathered.add(callers[0], [])
        parts = Parts(futures[0], gathered)
        for future, keys in zip(futures[1:], callers[1:], strict=True):
            gathered.add(keys, [])
            parts.append(future)
        for n in quitters & set(range(len(callers))):
            futures[n].cancel()  # gave up: the others still get theirs
        # The script's reply: a value a key, in KEYS' order (here, who asked for it).
        parts.set_result([(n, at) for n, keys in enumerate(callers) for at in range(len(keys))])
        for n, (future, keys) in enumerate(zip(futures, callers, strict=True)):
            if n in quitters:
                assert future.cancelled()
            else:
                assert future.result() == [(n, at) for at in range(len(keys))]
        assert parts.done()
    finally:
        loop.close()
