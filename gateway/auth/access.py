"""Who may call what: one table of route classes, read by the auth middleware and the docs.

Every route of the app is in `ROUTES` (tests/unit/test_auth_access.py lists `app.routes`
and fails on one that is not), so a new route cannot slip through unclassified. A route
the table misses anyway takes the admin key (fail closed); a path that is no route at all
needs any valid key, then gets the router's 404 (a scan learns nothing without a key).
The open mode (no admin key configured) lets everyone call everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gateway.auth.principal import Principal


class RouteClass(StrEnum):
    PUBLIC = "public"
    ADMIN = "admin"
    MODEL = "model"
    READ = "read"
    TASK_WRITE = "task_write"
    METRICS = "metrics"
    UNKNOWN = "unknown"


# Glob patterns (`*`: anything), first match wins; exact paths are looked up first.
ROUTES: tuple[tuple[str, RouteClass], ...] = (
    ("/healthz", RouteClass.PUBLIC),
    ("/ui", RouteClass.PUBLIC),  # the explorer page and its assets hold no data
    ("/ui/*", RouteClass.PUBLIC),
    ("/admin/*", RouteClass.ADMIN),
    ("/v1/chat/completions", RouteClass.MODEL),
    ("/v1/completions", RouteClass.MODEL),
    ("/v1/embeddings", RouteClass.MODEL),
    ("/v1/messages", RouteClass.MODEL),
    ("/v1/messages/*", RouteClass.MODEL),
    ("/v1/responses", RouteClass.MODEL),
    ("/v1/responses/*", RouteClass.MODEL),
    ("/v1/tasks/*/finish", RouteClass.TASK_WRITE),
    ("/v1/tasks*", RouteClass.READ),
    ("/v1/spend*", RouteClass.READ),
    ("/v1/gpu", RouteClass.READ),
    ("/v1/explorer/*", RouteClass.READ),
    ("/v1/cost/estimate", RouteClass.READ),
    ("/v1/models", RouteClass.READ),
    ("/v1/models/*", RouteClass.READ),
    ("/v1/prefix/lint", RouteClass.READ),
    ("/readyz", RouteClass.READ),
    ("/openapi.json", RouteClass.READ),
    ("/docs", RouteClass.READ),
    ("/docs/*", RouteClass.READ),
    ("/redoc", RouteClass.READ),
    ("/metrics", RouteClass.METRICS),
)

_ANY_KEY = frozenset({"admin", "member", "service", "finance"})


@dataclass(frozen=True, slots=True)
class Access:
    """The roles a route class admits (`admin` is the admin key), and why others are refused."""

    who: str  # for docs/security.md
    roles: frozenset[str]
    refusals: dict[str, str]


ACCESS: dict[RouteClass, Access] = {
    RouteClass.PUBLIC: Access("anyone, no key needed", frozenset(), {}),
    RouteClass.ADMIN: Access(
        "the admin key only",
        frozenset({"admin"}),
        {role: "admin endpoints take the admin key, not a virtual key" for role in _ANY_KEY},
    ),
    RouteClass.MODEL: Access(
        "member and service keys",
        frozenset({"member", "service"}),
        {
            "admin": "model calls take a member or service key (they are billed to its "
            "team); the admin key makes none",
            "finance": "finance keys read spend and metrics; they make no model calls",
        },
    ),
    RouteClass.READ: Access("any valid key, or the admin key", _ANY_KEY, {}),
    RouteClass.TASK_WRITE: Access(
        "member and service keys (their own team's tasks), or the admin key",
        frozenset({"admin", "member", "service"}),
        {"finance": "finance keys read tasks; they do not finish them"},
    ),
    RouteClass.METRICS: Access(
        "the admin key or a finance key",
        frozenset({"admin", "finance"}),
        {role: "/metrics takes the admin key or a finance key" for role in _ANY_KEY},
    ),
    RouteClass.UNKNOWN: Access("any valid key (then 404)", _ANY_KEY, {}),
}

_EXACT = {pattern: cls for pattern, cls in ROUTES if "*" not in pattern}
_GLOBS = tuple(
    (re.compile(re.escape(pattern).replace(r"\*", ".*") + r"\Z"), cls)
    for pattern, cls in ROUTES
    if "*" in pattern
)


def route_class(path: str) -> RouteClass | None:
    """The class of `path` in the table; None when no entry matches."""
    found = _EXACT.get(path)
    if found is not None:
        return found
    for pattern, cls in _GLOBS:
        if pattern.match(path):
            return cls
    return None


def refusal(cls: RouteClass, principal: Principal) -> str | None:
    """Why `principal` may not call a route of class `cls`, or None when it may."""
    if principal.kind == "open" or cls is RouteClass.PUBLIC:
        return None
    access = ACCESS[cls]
    role = principal.role
    if role in access.roles:
        return None
    return access.refusals.get(role, f"a {role} key may not call this endpoint")


def markdown_table() -> str:
    """The table as docs/security.md shows it (a test keeps the two the same)."""
    lines = ["| Path | Class | Who may call it |", "|---|---|---|"]
    for pattern, cls in ROUTES:
        lines.append(f"| `{pattern}` | {cls.value} | {ACCESS[cls].who} |")
    lines.append(f"| any other route of the app | admin | {ACCESS[RouteClass.ADMIN].who} |")
    lines.append(f"| a path that is no route | unknown | {ACCESS[RouteClass.UNKNOWN].who} |")
    return "\n".join(lines)
