"""`rawjson.patch_object` for small compact JSON, by re-rendering instead of scanning.

`patch_object` keeps every byte it does not edit: it finds the top-level members with a
per-member walk in Python (~10 µs for a 350-byte reply, every key decoded), then splices.
Most small bodies on the hot path (an upstream's reply, a usage chunk, an SDK's request)
are compact JSON exactly as orjson renders it; for those, rendering the edited object
gives the very bytes the splice would (0.3-0.5 µs): an edited member keeps its place, a
removed one goes with its comma, a new one is appended before the `}`, each value as
orjson dumps it.

That the body *is* orjson's rendering is checked, not assumed: `orjson.dumps(parsed)`
must equal `raw` byte for byte (which also rules out repeated keys, other whitespace,
other escapes or number spellings). Anything else, and bodies over `MAX_BYTES` (where the
check costs more than the scan), get `None`, and the caller splices with `patch_object`.

`patch_spans` takes any other small body whose keys are written without escapes (the
`json.dumps` rendering of `requests` and scripts among them) and only has fields set: one
native call finds the members, comparing keys as bytes, and splices as `patch_object`
does (~1 µs for a 120-byte request, where rendering it again to check it took ~6).

`patch_spaced` does the same for the other rendering small bodies come in: Python's
`json.dumps` with its defaults (`", "` and `": "`, ASCII-escaped), what `requests`'
`json=` and many scripts send. There the splice writes each new value as orjson does
(compact) and appends a new member as `,"key":value`; so the fast path renders the kept
members as `json.dumps` did and takes it only where each edited value renders the same
both ways (a string, a number, a literal, an empty container).
"""

from __future__ import annotations

import json.encoder
import os
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

import orjson

MAX_BYTES = 4096
"""Up to here rendering a body to compare it costs at most a few µs (and 0.1-0.3 µs for a
reply of text); past it, the scan's cost no longer grows with the body while this does."""


MAX_SET_FIELDS = 64
"""The most fields `_rawjson.set_members` sets in one call (and the most members it edits)."""


def patch_compact(
    raw: bytes,
    parsed: Mapping[str, Any],
    set_fields: Mapping[str, Any],
    remove: Iterable[str] = (),
    *,
    rendered: bool = False,
) -> bytes | None:
    """`patch_object(raw, set_fields, remove)` when `raw` is `orjson.dumps(parsed)`, else None.

    `parsed` is `raw` parsed (the caller's object, not changed here). `rendered`: the
    caller made `raw` as `orjson.dumps(parsed)` itself, so it is not rendered again to see.
    """
    if len(raw) > MAX_BYTES or type(raw) is not bytes:
        return None
    try:
        if not rendered and orjson.dumps(parsed) != raw:
            return None
        for key in set_fields:
            if key not in parsed and not _plain(key):
                return None  # `patch_object` writes a new key ASCII-escaped, orjson does not
        edited = _kept(parsed, set_fields, remove)
        edited.update(set_fields)  # a present key keeps its place, a new one goes last
        return orjson.dumps(edited)
    except TypeError:  # a value orjson will not render (an int over 64 bits): splice
        return None


def patch_rendered(
    raw: bytes,
    parsed: Mapping[str, Any],
    set_fields: Mapping[str, Any],
    remove: Iterable[str] = (),
    *,
    rendered: bool = False,
) -> bytes | None:
    """`patch_object`'s bytes for a small body: orjson's rendering (an SDK's) rendered again,
    any other whose keys are unescaped spliced where a native walk found the members
    (`patch_spans`), `json.dumps`'s (`requests`, scripts) rendered again; else None.
    `rendered`: `raw` is `orjson.dumps(parsed)`, made so by the caller (`patch_compact`)."""
    fast = patch_compact(raw, parsed, set_fields, remove, rendered=rendered)
    if fast is None:
        fast = patch_spans(raw, set_fields, remove)
    return fast if fast is not None else patch_spaced(raw, parsed, set_fields, remove)


def patch_spans(
    raw: bytes, set_fields: Mapping[str, Any], remove: Iterable[str] = ()
) -> bytes | None:
    """`patch_object(raw, set_fields, remove, trusted=True)` for a small object already
    parsed as JSON that only has fields set, spliced in one native call where it finds
    the members (`_rawjson.set_members`: keys compared as bytes, no Python step per member).

    None where that cannot be sure of the same bytes: no native walker, a body over
    `MAX_BYTES`, a removal (its neighbouring comma goes with it: `patch_object` cuts it),
    a key written with an escape (compared as bytes it would not match), a new key that
    `patch_object` would escape, a value orjson will not render (`patch_object` raises
    for it itself).
    """
    if _SET_MEMBERS is None or len(raw) > MAX_BYTES or type(raw) is not bytes:
        return None
    if not set_fields or len(set_fields) > MAX_SET_FIELDS:
        return None  # nothing set, or more than the native call takes
    if remove and not set(remove) <= set_fields.keys():
        return None  # a member to remove
    try:
        keys = tuple(map(str.encode, set_fields))
        values = tuple(map(orjson.dumps, set_fields.values()))  # what the splice writes
    except (TypeError, UnicodeEncodeError):  # not JSON, or a key that is not UTF-8
        return None
    return _SET_MEMBERS(raw, keys, values)


def _set_members() -> Any:
    """`_rawjson.set_members`, or None without the native walker."""
    if os.environ.get("FAREBOX_RAWJSON_NATIVE", "1") == "0":
        return None
    try:
        from gateway import _rawjson  # type: ignore[attr-defined]
    except ImportError:  # built without a C compiler
        return None
    return getattr(_rawjson, "set_members", None)  # None from an older build


_SET_MEMBERS = _set_members()


def _kept(
    parsed: Mapping[str, Any], set_fields: Mapping[str, Any], remove: Iterable[str]
) -> dict[str, Any]:
    """`parsed`'s members less those removed (a key also set stays, to be overwritten)."""
    if not remove:  # the usual edit (an empty tuple, list or set; an iterator is truthy)
        return dict(parsed)  # a copy in C
    removed = set(remove) - set(set_fields)
    return {k: v for k, v in parsed.items() if k not in removed}


def _plain(key: str) -> bool:
    """Whether `key` is written the same escaped or not: printable ASCII, no quote or `\\`."""
    return key.isascii() and key.isprintable() and '"' not in key and "\\" not in key


def _unrenderable(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


# `json.dumps(value)` with its defaults (one encoder, built once: `json.dumps` builds one
# per call); parsed JSON is never circular, so no markers. None without the C accelerator.
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed's stubs
_SPACED = (
    _MAKE_ENCODER(
        None, _unrenderable, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    if _MAKE_ENCODER is not None
    else None
)


def patch_spaced(
    raw: bytes,
    parsed: Mapping[str, Any],
    set_fields: Mapping[str, Any],
    remove: Iterable[str] = (),
) -> bytes | None:
    """`patch_object(raw, set_fields, remove)` when `raw` is `json.dumps(parsed)`, else None.

    `parsed` is `raw` parsed (the caller's object, not changed here).
    """
    if len(raw) > MAX_BYTES or type(raw) is not bytes or _SPACED is None:
        return None
    try:
        if "".join(_SPACED(parsed, 0)).encode("ascii") != raw:
            return None
        edited = _kept(parsed, set_fields, remove)
        added: list[bytes] = []
        for key, value in set_fields.items():
            rendered = orjson.dumps(value)  # what the splice writes
            if key not in edited:
                added.append(b'"%s":%s' % (encode_basestring_ascii(key)[1:-1].encode(), rendered))
            elif "".join(_SPACED(value, 0)).encode("ascii") == rendered:
                edited[key] = value
            else:
                return None  # a value spaced apart, or escaped, in one rendering only
        body = "".join(_SPACED(edited, 0)).encode("ascii")
    except (TypeError, ValueError, UnicodeEncodeError):  # not JSON, or not this rendering
        return None
    if not added:
        return body
    return b"%s%s%s}" % (body[:-1], b"," if edited else b"", b",".join(added))
