"""The identifier rules of gateway.pipeline.identifiers: length, printable, UTF-8 headers."""

from __future__ import annotations

import pytest

from gateway.errors import InvalidRequestError
from gateway.pipeline.identifiers import (
    check_header,
    check_identifier,
    header_text,
    identifier_problem,
)


@pytest.mark.parametrize(
    "value",
    ["task-1", "a b", "tâche", "タスク", "🚀", "👩\u200d💻", "step:plan/2 #3", "x" * 20],
)
def test_printable_values_pass(value: str) -> None:
    assert identifier_problem(value, 20) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "empty"),
        ("x" * 11, "11 characters long; the limit is 10"),
        ("a\x00", "U+0000 at position 1"),
        ("a\r", "U+000D"),
        ("\n", "U+000A"),
        ("a\tb", "U+0009"),
        ("a\x7f", "U+007F"),
        ("a\x85", "U+0085"),
        ("a\u00a0b", "U+00A0"),  # no-break space: looks like a space, is not one
        ("a\u2028", "U+2028"),  # line separator
        ("a\u202e", "U+202E"),  # right-to-left override
        ("a\udcff", "U+DCFF"),  # lone surrogate
        ("a\ue000", "U+E000"),  # private use
    ],
)
def test_problems_are_named(value: str, says: str) -> None:
    problem = identifier_problem(value, 10)
    assert problem is not None and says in problem


def test_check_raises_a_400_naming_the_param() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        check_identifier("a\x00", "metadata.task_id", 10)
    assert caught.value.status_code == 400
    assert caught.value.param == "metadata.task_id" and caught.value.code == "invalid_identifier"


def test_header_values_are_read_as_utf8() -> None:
    sent = "🚀-tâche".encode().decode("latin-1")  # what an ASGI server hands over
    assert header_text(sent, "x-task-id") == "🚀-tâche"
    assert check_header(sent, "x-task-id", 10) == "🚀-tâche"
    assert check_header("", "x-task-id", 10) is None and check_header(None, "x", 1) is None
    with pytest.raises(InvalidRequestError, match="not valid UTF-8"):
        header_text(b"\xff".decode("latin-1"), "x-task-id")
