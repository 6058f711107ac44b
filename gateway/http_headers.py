"""Response header values that every HTTP stack can send, whatever their source.

A header value comes from a client (a task id), the configuration (a rule name) or an
upstream (`retry-after`); any of them may hold characters HTTP/1.1 cannot carry (CR, LF,
NUL, other controls, anything outside Latin-1) or that h11 refuses (leading or trailing
blanks). Sent as they are, the response fails after the upstream was already paid for.
So every value is passed through `safe_header_value` in one place before it goes out:
printable ASCII is kept as it is, anything else is percent-encoded (UTF-8), which is
lossless and readable with any URL decoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

MAX_HEADER_VALUE_CHARS = 1024
"""Longer values are cut: httpx's default reader refuses a header block over 16 KiB."""

_PRINTABLE = frozenset(chr(code) for code in range(0x20, 0x7F))
_SAFE_WHEN_QUOTING = "".join(sorted(_PRINTABLE - {"%", " "}))


def safe_header_value(value: str) -> str:
    """`value` unchanged when it can be sent as is, else percent-encoded; never too long."""
    if _sendable(value):
        return value[:MAX_HEADER_VALUE_CHARS]
    quoted = quote(value, safe=_SAFE_WHEN_QUOTING)
    if len(quoted) <= MAX_HEADER_VALUE_CHARS:
        return quoted
    return _quoted_prefix(value)


def _quoted_prefix(value: str) -> str:
    """The longest encoded prefix that fits, cut between characters (never in an escape)."""
    parts: list[str] = []
    size = 0
    for char in value:
        piece = quote(char, safe=_SAFE_WHEN_QUOTING)
        if size + len(piece) > MAX_HEADER_VALUE_CHARS:
            break
        parts.append(piece)
        size += len(piece)
    return "".join(parts)


def safe_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The same headers, each value made sendable (names are the gateway's own).

    A value that is sendable as it is (every value of a usual reply: ids, tiers, costs)
    is checked inline, not through two calls per header (~30% of this function's
    instructions); any other goes through `safe_header_value`.
    """
    # Every value at once: joined by single spaces, the join is printable ASCII with no
    # blank at either end, no two blanks together and no longer than one value may be
    # only when each value is sendable as it is (none empty, none with a blank at an end).
    # A value with two blanks inside takes the loop below, to the same result.
    joined = " ".join(headers.values())
    if (
        joined
        and joined.isascii()
        and joined.isprintable()
        and joined[0] != " "
        and joined[-1] != " "
        and "  " not in joined
        and len(joined) <= MAX_HEADER_VALUE_CHARS
    ):
        return dict(headers)
    safe: dict[str, str] = {}
    for name, value in headers.items():
        if (  # an empty value takes the other path (to the same result)
            value
            and value.isascii()
            and value.isprintable()
            and value[0] != " "
            and value[-1] != " "
            and len(value) <= MAX_HEADER_VALUE_CHARS
        ):
            safe[name] = value
        else:
            safe[name] = safe_header_value(value)
    return safe


def _sendable(value: str) -> bool:
    if not value:
        return True
    if value[0] == " " or value[-1] == " ":
        return False
    return value.isascii() and value.isprintable()
