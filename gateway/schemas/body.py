"""Read a JSON request body: valid JSON, an object, and no deeper than the gateway handles.

orjson accepts nesting up to 1,024 levels, deeper than several pure-Python stages (deep
copies, the prefix scan, the simulator) can walk on the default stack, so every body is
held to `MAX_DEPTH` levels here, once, before any stage sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.rawjson import bracket_depth

MAX_DEPTH = 128


def load_object(raw: bytes, max_depth: int = MAX_DEPTH, bound: int | None = None) -> dict[str, Any]:
    """Parse `raw` as a JSON object nested at most `max_depth` levels, else a 400.

    `bound`: `bracket_depth(raw)`, when the caller has it already (`depth_and_commas`).
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    # The bytes' bracket depth bounds the value's: only a body that may be too deep is walked.
    # A value nested d levels takes 2d bracket bytes: a short body needs no count at all.
    if len(raw) < 2 * (max_depth + 1):
        return body
    if bound is None:
        bound = bracket_depth(raw)
    if (bound is None or bound > max_depth) and depth_over(body, max_depth):
        raise InvalidRequestError(
            f"request body is nested more than {max_depth} levels deep; flatten it"
        )
    return body


def depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def invalid_field(
    errors: Sequence[Mapping[str, Any]], *, fastapi: bool = False, body: Any = None
) -> InvalidRequestError:
    """The 400 for the first of pydantic's errors (FastAPI's, with `fastapi`), naming the field.

    Given the validated `body`, union branches that pydantic names in `loc` (`str`,
    `list[...]`) are left out: `messages[0].content`, not `messages[0].content.str`.
    """
    if not errors:
        return InvalidRequestError("invalid request")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return InvalidRequestError(f"request body is not valid JSON: {first.get('msg')}")
    loc = tuple(first.get("loc", ()))
    if body is not None:
        loc = _fields_only(loc, body)
    param = param_path(loc[1:] if fastapi and len(loc) > 1 and loc[0] in _SOURCES else loc)
    message = "is required" if first.get("type") == "missing" else str(first.get("msg"))
    return InvalidRequestError(f"invalid field '{param}': {message}", param=param)


def _fields_only(loc: tuple[int | str, ...], body: Any) -> tuple[int | str, ...]:
    """`loc` without the parts that are not keys or indexes of `body` (union branch tags)."""
    kept: list[int | str] = []
    node: Any = body
    for part in loc:
        if _holds(node, part):
            node = node[part]
        elif isinstance(part, str) and (not isinstance(node, dict) or _looks_like_tag(part)):
            continue  # a branch name: a value that is not an object has no keys to name
        else:
            node = None  # a missing key: the rest of `loc` names what belongs there
        kept.append(part)
    return tuple(kept)


def _holds(node: Any, part: int | str) -> bool:
    """Whether `part` is a key of the object or an index of the array `node`."""
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _looks_like_tag(part: str) -> bool:
    """pydantic's name for a union branch: `str`, `list[...]`, `function-after[...]`."""
    return part in {"str", "int", "float", "bool", "none", "list", "dict"} or "[" in part


def param_path(loc: Sequence[int | str]) -> str:
    """`messages[0].role` for pydantic's ("messages", 0, "role")."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


# FastAPI puts where a parameter came from first in `loc`: not part of the field's name.
_SOURCES = ("body", "query", "path", "header", "cookie")
