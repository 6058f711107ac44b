"""A hint for 404s that look like a base_url without `/v1` (or with it twice).

The OpenAI SDK appends `/chat/completions` to its base_url, so `base_url=http://host:4000`
asks for `/chat/completions`; the anthropic SDK appends `/v1/messages`, so a base_url
ending in `/v1` asks for `/v1/v1/messages`. Both get a 404 that names the right URL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from starlette.routing import BaseRoute, Match


def missing_v1_hint(routes: Iterable[BaseRoute], scope: Mapping[str, Any], root: str) -> str | None:
    """What to change when the request's path would be a route with `/v1` once, else None.

    `root` is the gateway's base URL as the client reached it, ending in `/`."""
    path = scope["path"]
    if path.startswith("/v1/v1/"):
        candidate, problem = path[3:], "/v1 appears twice"
    elif not path.startswith("/v1/") and path != "/":
        candidate, problem = "/v1" + path, "the path lacks /v1"
    else:
        return None
    moved = {**scope, "path": candidate, "raw_path": candidate.encode()}
    if all(route.matches(moved)[0] is Match.NONE for route in routes):
        return None
    if candidate.startswith("/v1/messages"):  # the anthropic SDK adds /v1 itself
        base = f"set the anthropic SDK's base_url to {root.rstrip('/')} (no /v1)"
    else:
        base = f"set the OpenAI SDK's base_url to {root}v1"
    return f"did you mean {candidate}? ({problem}): {base}"
