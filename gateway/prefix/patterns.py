"""The volatile-content patterns: one compiled regex, then a cheap check per candidate.

Python's regex engine costs ~10 ns per byte whatever the pattern, and far more when every
position can start a match. So the single pattern starts with a digit that begins a digit
run: every timestamp, date, epoch, UUID, trace id, hex or base64 nonce we flag contains a
digit, and digits are a few percent of prompt text. Tokens whose digits come late are
reached by extending the match backwards in Python, only for the rare candidates.
Known gap, by design: an id or nonce with no digit at all (≈3% of random 20-character
base64) is not flagged; the cross-request diff still catches it when it changes.

Works on the canonical JSON bytes of a segment, so `\\n2026-...` (an escaped newline before
a date) must count as a boundary.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import pairwise
from typing import NamedTuple

_MONTHS = (
    rb"(?:January|February|March|April|May|June|July|August|September|October|November"
    rb"|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)"
)
_WEEKDAYS = (
    rb"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
    rb"|Mon|Tues|Tue|Wed|Thurs|Thur|Thu|Fri|Sat|Sun)"
)
_HMS = rb"(?:[01]?[0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.,][0-9]{1,9})?)?"
_ZONE = (
    rb"(?: ?[AaPp]\.?[Mm]\.?)?"
    rb"(?: ?(?:Z|UTC|GMT|[+-](?:[01][0-9]|2[0-3]):?[0-5][0-9]|[A-Z]{2,4}T)(?![A-Za-z]))?"
)
_TIME_SUFFIX = rb"(?:(?:,? (?:at )?|T| )" + _HMS + _ZONE + rb"(?![0-9]))?"
_TOKEN_CHARS = rb"[0-9A-Za-z_+/=-]"
_ORDINAL = rb"(?:st|nd|rd|th)?"

# Each branch continues after the anchor digit, which the pattern's first item consumes;
# keeping that item a plain character class lets the engine skip to digits at C speed.
_BRANCHES = {
    "iso": rb"(?<=[12])[0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    rb"(?:[T ]" + _HMS + _ZONE + rb")?(?![0-9])",
    "isoc": rb"(?<=2)[0-9]{3}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    rb"T(?:[01][0-9]|2[0-3])[0-5][0-9][0-5][0-9]Z?(?![0-9])",
    "ymd": rb"(?<=[12])[0-9]{3}(?P<ysep>[/.])(?:0?[1-9]|1[0-2])(?P=ysep)"
    rb"(?:0?[1-9]|[12][0-9]|3[01])(?![0-9])" + _TIME_SUFFIX,
    "dmy": rb"[0-9]?(?P<dsep>[/.-])[0-9]{1,2}(?P=dsep)(?:19|20)[0-9]{2}(?![0-9])" + _TIME_SUFFIX,
    "dlong": rb"[0-9]?" + _ORDINAL + rb" (?:of )?" + _MONTHS + rb"\.?,? (?:19|20)[0-9]{2}"
    rb"(?![0-9])" + _TIME_SUFFIX,
    "mlong": rb"[0-9]?" + _ORDINAL + rb",? (?:19|20)[0-9]{2}(?![0-9])" + _TIME_SUFFIX,
    "clock": rb"[0-9]?:[0-5][0-9]:[0-5][0-9](?:[.,][0-9]{1,9})?" + _ZONE + rb"(?![0-9:])",
    "epoch": rb"(?<=1)[0-9]{9}(?:[0-9]{3})?(?:\.[0-9]{1,6})?(?![0-9A-Za-z_])",
    "tok": rb"(?:"
    + _TOKEN_CHARS
    + rb"{6,}|(?<="
    + _TOKEN_CHARS
    + rb"{12}[0-9])"
    + _TOKEN_CHARS
    + rb"*)",
}
CANDIDATES = re.compile(
    rb"[0-9](?<![0-9][0-9])(?:"
    + b"|".join(b"(?P<" + name.encode() + b">" + body + b")" for name, body in _BRANCHES.items())
    + rb")"
)

_WEEKDAY_BEFORE = re.compile(_WEEKDAYS + rb"\.?,? $")
_MONTH_BEFORE = re.compile(rb"(?:" + _WEEKDAYS + rb"\.?,? )?" + _MONTHS + rb"\.? $")
_TIME_CONTEXT = re.compile(
    rb"time|date|now|epoch|created|updated|modified|expir|issued|since|until"
    rb"|(?:^|[^a-z])(?:ts|iat|nbf|exp|at)(?:[^a-z]|$)"
)
_ID_CONTEXT = re.compile(
    rb"(?:request|req|trace|span|correlation|session|run|message|msg|job|conversation"
    rb"|idempotency)[-_ ]?(?:id|key)[\\\"']*\s*[:=]\s*[\\\"']*$"
)
_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TRACEPARENT = re.compile(rb"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_ULID = re.compile(rb"[0-7][0-9A-HJKMNP-TV-Z]{25}")
_HEX = re.compile(rb"[0-9a-fA-F]{16,}")
_PREFIXED = re.compile(rb"[A-Za-z][A-Za-z0-9]{1,15}[_-]([A-Za-z0-9]{10,})")
_BASE64 = re.compile(rb"[A-Za-z0-9+/_-]{20,}={0,2}")
_PIECES = re.compile(rb"[^=/]{8,}={0,2}")
_PATHLIKE = re.compile(rb"(?:^|/)[a-z]{2,}[0-9]?(?:/|$)")
_WORDS = re.compile(rb"[A-Z]?[a-z]{3,}|[A-Z]{4,}")
_SEPARATORS = re.compile(rb"[-_/]")
_VOWELS = frozenset(b"aeiouAEIOU")
_CLAUSE_END = re.compile(rb"[,;{}\[\]()]|\\n")
_TOKEN_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_+/=-")
_ALNUM = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_DIGITS = frozenset(b"0123456789")
_UPPER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset(b"abcdefghijklmnopqrstuvwxyz")
_MAX_TOKEN = 256  # the right context of a scan window: a cut token reads as longer
_LOOKBACK = 48


class Hit(NamedTuple):
    """A volatile span in a segment's bytes: [start, end) and its kind."""

    start: int
    end: int
    kind: str


def classify(data: bytes, match: re.Match[bytes]) -> Hit | None:
    """Return the volatile span a candidate match stands for, or None if it is benign."""
    branch = match.lastgroup or ""
    start, end = match.span()
    if branch == "tok":
        return _token(data, start, end)
    if not _left_boundary(data, start):
        return None
    if branch == "epoch":
        return _epoch(data, start, end)
    if branch == "clock":
        return _clock(data, start, end)
    if branch == "dmy" and not _valid_dmy(data[start:end]):
        return None
    if branch == "dlong":
        before = _WEEKDAY_BEFORE.search(data, max(start - 16, 0), start)
        start = before.start() if before and _left_boundary(data, before.start()) else start
    elif branch == "mlong":
        before = _MONTH_BEFORE.search(data, max(start - 32, 0), start)
        if before is None or not _left_boundary(data, before.start()):
            return None
        start = before.start()
    kind = "timestamp" if b":" in data[start:end] or branch == "isoc" else "date"
    return Hit(start, end, kind)


def _left_boundary(data: bytes, start: int) -> bool:
    """Return whether `start` begins a word (an escaped `\\n`, `\\t`, `\\r` counts as space)."""
    if start == 0:
        return True
    previous = data[start - 1]
    if previous not in _ALNUM and previous not in b".:":
        return True
    return previous in b"nrt" and start >= 2 and data[start - 2] == 0x5C


def _epoch(data: bytes, start: int, end: int) -> Hit | None:
    seconds = int(data[start : start + 10])
    if not 1_000_000_000 <= seconds <= 2_100_000_000:
        return None
    context = data[max(start - 32, 0) : start].lower()
    # Only the words since the previous separator count: the key of this very value.
    context = _CLAUSE_END.split(context)[-1]
    return Hit(start, end, "epoch") if _TIME_CONTEXT.search(context) else None


def _clock(data: bytes, start: int, end: int) -> Hit | None:
    hour_end = data.index(b":", start)
    if int(data[start:hour_end]) > 23:
        return None
    return Hit(start, end, "timestamp")


def _valid_dmy(text: bytes) -> bool:
    separator = next(c for c in text if c in b"/.-")
    first, second = (int(p) for p in text.split(bytes([separator]))[:2])
    if separator == ord(".") and not text[2:3] == b"." == text[5:6]:
        return False  # dotted dates are always dd.mm.yyyy; anything else is a version
    in_range = 1 <= first <= 31 and 1 <= second <= 31
    return in_range and (first <= 12 or second <= 12)


def _token(data: bytes, start: int, end: int) -> Hit | None:
    """Extend a digit-anchored candidate to its whole token and classify it."""
    floor = max(start - _MAX_TOKEN, 0)
    while start > floor and data[start - 1] in _TOKEN_BYTES:
        start -= 1
    if start > 0 and data[start - 1] == 0x5C and data[start] in b"nrt":
        start += 1  # the "n" of an escaped newline is not part of the token
    if end - start > _MAX_TOKEN:
        # Data, not an id: an inline image or a minified bundle is as stable as the text
        # around it. (A token cut by the scan's right context is over this length too.)
        return None
    token = data[start:end]
    before = data[max(start - _LOOKBACK, 0) : start]
    pathlike = b"/" in token and _PATHLIKE.search(token) is not None
    kind, offset, length = (None, 0, 0) if pathlike else token_kind(token, before)
    if kind is None and (b"/" in token or b"=" in token.rstrip(b"=")):
        # A path or a key=value pair: judge each piece on its own.
        for piece in _PIECES.finditer(token):
            kind, offset, length = token_kind(piece.group(), token[: piece.start()])
            if kind is not None:
                offset += piece.start()
                break
    if kind is None:
        return None
    return Hit(start + offset, start + offset + length, kind)


def token_kind(token: bytes, before: bytes) -> tuple[str | None, int, int]:
    """Return (kind, offset, length) of the volatile part of `token`, or (None, 0, 0)."""
    if token[:2] in (b"0x", b"0X"):
        return None, 0, 0
    if _TRACEPARENT.fullmatch(token):
        return "traceparent", 0, len(token)
    uuid = _UUID.search(token)
    if uuid:
        return "uuid", uuid.start(), uuid.end() - uuid.start()
    if _ULID.fullmatch(token) and _mixed(token, 0.3):
        return "ulid", 0, len(token)
    if _HEX.fullmatch(token) and _mixed(token, 0.25) and _has(token, _LOWER | _UPPER, 2):
        return "hex", 0, len(token)
    prefixed = _PREFIXED.fullmatch(token)
    if prefixed and _random_body(prefixed.group(1)):
        return "request_id", 0, len(token)
    if _BASE64.fullmatch(token) and _random_nonce(token.rstrip(b"=")):
        return "base64", 0, len(token)
    if (
        len(token) >= 6
        and _has(token, _DIGITS, 1)
        and not _word_like(token)
        and _ID_CONTEXT.search(before.lower())
    ):
        return "request_id", 0, len(token)
    return None, 0, 0


def _has(token: bytes, chars: frozenset[int], count: int) -> bool:
    return sum(1 for c in token if c in chars) >= count


def _classes(token: bytes) -> list[int]:
    return [0 if c in _DIGITS else 1 if c in _UPPER else 2 if c in _LOWER else 3 for c in token]


def _mixed(token: bytes, min_flips: float) -> bool:
    """Return whether character classes change often, as in random strings, not words."""
    classes = _classes(token)
    flips = sum(1 for a, b in pairwise(classes) if a != b)
    return flips >= min_flips * (len(token) - 1)


def _random_body(body: bytes, min_flips: float = 0.35, need_digit: bool = True) -> bool:
    """Return whether an id body or nonce looks random rather than like an identifier."""
    if need_digit and not _has(body, _DIGITS, 1):
        return False
    if not _has(body, _UPPER | _LOWER, 2) or not _mixed(body, min_flips) or _word_like(body):
        return False
    return entropy(body) >= 3.0


def _random_nonce(token: bytes) -> bool:
    """Return whether a base64 candidate is noise, not a path or a hyphenated model name."""
    if not (_has(token, _UPPER, 1) and _has(token, _LOWER, 1)):
        return False
    pieces = _SEPARATORS.split(token)
    if len(pieces) > 2 or b"/" in token:
        # Names like Qwen/Qwen3-VL-8B or EVP_PKEY_set1 are mostly short words between
        # separators; random base64url has a separator or two inside long random runs.
        named = sum(len(p) for p in pieces if len(p) <= 5 or _word_like(p))
        if 2 * named >= sum(map(len, pieces)):
            return False
        return _random_body(b"".join(pieces), 0.4)
    return _random_body(token, 0.4)


def _word_like(token: bytes) -> bool:
    """Return whether the letters read as words (camelCase, snake_case), not noise.

    Tuned on random ids against identifiers from the standard library and site-packages:
    random base64 puts ~19% vowels among its letters and rarely 3-letter lowercase runs.
    """
    letters = _has_count(token, _UPPER | _LOWER)
    if letters == 0:
        return False
    in_words = sum(len(w) for w in _WORDS.findall(token))
    vowels = _has_count(token, _VOWELS)
    return in_words >= 0.5 * letters and vowels >= 0.25 * letters


def _has_count(token: bytes, chars: frozenset[int]) -> int:
    return sum(1 for c in token if c in chars)


def entropy(token: bytes) -> float:
    """Return the Shannon entropy of `token` in bits per character."""
    total = len(token)
    return -sum(n / total * math.log2(n / total) for n in Counter(token).values())
