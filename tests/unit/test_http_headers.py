"""Header values from any source can always be sent, and decode back to what they were."""

from __future__ import annotations

import random
from urllib.parse import unquote

import h11
import pytest

from gateway.http_headers import MAX_HEADER_VALUE_CHARS, safe_header_value, safe_headers


@pytest.mark.parametrize(
    "value",
    ["task-7", "a b", "50%", "", "fast lane: v2 (beta)", "~!@#$^&*()_+{}|<>?"],
)
def test_printable_ascii_is_kept_as_is(value: str) -> None:
    assert safe_header_value(value) == value


@pytest.mark.parametrize(
    "value",
    ["t-\U0001f680", "été", "a\r\nX-Injected: 1", "nul\x00", "tab\there", " x", "x ", "\x7f"],
)
def test_anything_else_is_percent_encoded_losslessly(value: str) -> None:
    sent = safe_header_value(value)
    assert sent.isascii() and sent.isprintable() and sent == sent.strip()
    assert unquote(sent) == value


def test_values_are_capped_without_cutting_an_escape() -> None:
    assert len(safe_header_value("a" * 5000)) == MAX_HEADER_VALUE_CHARS
    cut = safe_header_value("\U0001f680" * 500)
    assert len(cut) <= MAX_HEADER_VALUE_CHARS and "%" not in cut[-2:]
    assert unquote(cut) == "\U0001f680" * (len(cut) // 12)


def test_h11_accepts_every_sanitized_value() -> None:
    rnd = random.Random(5)
    alphabet = [chr(c) for c in range(0, 0x250)] + ["\U0001f680", "\u2028", "\ufeff"]
    for _ in range(2000):
        value = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 20)))
        headers = safe_headers({"x-task-id": value})
        raw = [(name, sent.encode("latin-1")) for name, sent in headers.items()]
        h11.Response(status_code=200, headers=raw)  # raises on anything HTTP cannot carry


def test_safe_headers_sends_each_value_as_safe_header_value_does() -> None:
    rnd = random.Random(7)
    alphabet = ["a", "Z", "0", " ", "%", "\t", "\x7f", "\x00", "é", "\U0001f680", "\r", "\n"]
    values = ["", " ", "x", " x", "x ", "a" * 1024, "a" * 1025, "a " * 600, "\U0001f680" * 300]
    values += [
        "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))) for _ in range(3000)
    ]
    headers = {f"x-h-{at}": value for at, value in enumerate(values)}
    sent = safe_headers(headers)
    assert list(sent) == list(headers)
    assert sent == {name: safe_header_value(value) for name, value in headers.items()}


def test_safe_headers_of_a_few_values_at_once_as_each_alone() -> None:
    """The joined check (a reply's few headers at once) takes exactly the values that are
    sendable as they are: blanks at an end, empty values, two blanks inside, controls and
    lengths near the cap all give what `safe_header_value` gives each value alone."""
    rnd = random.Random(11)
    alphabet = ["a", "Z", "0", " ", " ", "%", "~", "\t", "\x7f", "\x00", "é", "\r", "\n"]
    edges = ["", " ", "  ", "a", " a", "a ", "a  b", "a b", "a" * 1024, "a" * 1025, "a" * 1023]
    for _ in range(5000):
        count = rnd.randint(1, 8)
        values = [
            rnd.choice(edges)
            if rnd.random() < 0.3
            else "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
            for _ in range(count)
        ]
        headers = {f"x-h-{at}": value for at, value in enumerate(values)}
        sent = safe_headers(headers)
        assert list(sent) == list(headers)
        assert sent == {name: safe_header_value(value) for name, value in headers.items()}
        assert sent is not headers
    assert safe_headers({}) == {}
