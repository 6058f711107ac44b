"""The names a client gives things (task ids, steps, teams, projects, tags), checked at the edge.

They end up in ledger rows, shared-state keys, logs and response headers, so a value is
refused with a 400 naming the field unless it is

* not empty and at most its limit long (in characters);
* printable: letters, digits, punctuation, symbols, emoji and the ASCII space, in any
  script. Control characters (NUL, CR, LF, TAB, DEL, C1), format characters (except the
  zero-width joiners emoji and some scripts need), other separators, surrogates, private
  use and unassigned code points are refused.

A header value arrives as Latin-1 text (that is how ASGI servers decode bytes); it is
read as the UTF-8 a client sends, and refused if it is not valid UTF-8. Pure: no I/O.
"""

from __future__ import annotations

from gateway.errors import InvalidRequestError

MAX_TASK_ID = 256
MAX_TASK_STEP = 256
MAX_NAME = 128  # team, project, step kind
MAX_OUTCOME = 64
MAX_TAGS = 1024  # the whole comma-separated list
_JOINERS = frozenset("\u200c\u200d")  # ZWNJ, ZWJ: emoji sequences, Persian, Indic scripts
_CODE = "invalid_identifier"


def identifier_problem(value: str, limit: int) -> str | None:
    """Say what is wrong with `value` as an identifier of at most `limit` characters, or None."""
    if not value:
        return "must not be empty"
    if len(value) > limit:
        return f"is {len(value)} characters long; the limit is {limit}"
    if value.isprintable():
        return None
    for position, char in enumerate(value):
        if not char.isprintable() and char not in _JOINERS:
            return (
                f"contains the non-printable character U+{ord(char):04X} at position {position}; "
                "use printable characters only (no control characters or line breaks)"
            )
    return None


def check_identifier(value: str, param: str, limit: int) -> str:
    """Return `value`, or raise a 400 naming `param` when it is not a valid identifier."""
    problem = identifier_problem(value, limit)
    if problem is not None:
        raise InvalidRequestError(f"invalid {param}: {problem}", param=param, code=_CODE)
    return value


def header_text(value: str, param: str) -> str:
    """Return a header value as the UTF-8 text its bytes carry; a 400 if they are not UTF-8."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(
            f"invalid {param}: the header value is not valid UTF-8", param=param, code=_CODE
        ) from exc


def check_header(value: str | None, param: str, limit: int) -> str | None:
    """Decode and check an optional header value; an absent or empty one is None."""
    if not value:
        return None
    return check_identifier(header_text(value, param), param, limit)
