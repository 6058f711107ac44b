"""Stage 2: who is calling, and which task and step this request belongs to.

The task comes from `X-Task-Id` / `X-Task-Step` / `X-Task-Done` headers or from the body's
`metadata.task_id` / `metadata.task_step`, which are removed before forwarding. Without a
task id the request is a task of its own. Every name is checked by
`gateway.pipeline.identifiers` (a 400 naming the header or field), so what reaches the
ledger, shared state and logs is printable and short.

Who is billed comes from the principal (docs/security.md, "Identity and tasks"):

* a virtual key: team, project and plan are the key's, the caller is the key id. A member
  key's `X-Farebox-Team`, `X-Farebox-Project` or `X-Plan` that differs from the key's own
  value is refused with a 403 naming the header (an equal one is harmless); a service key
  may set them per request, its own values being the defaults;
* open mode: the headers are believed, the caller is a hash of the bearer token.

The headers the policy matches (`x-plan` in a rule's `headers:`) are rewritten to the
values in force, so a client cannot pick a plan its key does not have.
"""

from __future__ import annotations

from typing import Any

from gateway.auth.principal import Principal
from gateway.errors import PermissionDeniedError
from gateway.keys.secrets import sha256_hex
from gateway.pipeline.context import Identity, RequestContext, TaskRef
from gateway.pipeline.identifiers import (
    MAX_NAME,
    MAX_TAGS,
    MAX_TASK_ID,
    MAX_TASK_STEP,
    check_header,
    check_identifier,
)

TASK_KEYS = ("task_id", "task_step", "task_done")
TEAM, PROJECT, PLAN = "x-farebox-team", "x-farebox-project", "x-plan"
IDENTITY_HEADERS = (TEAM, PROJECT, PLAN)


def caller_id(authorization: str | None) -> str | None:
    """A stable, non-reversible id for the caller's key (the key itself is never kept)."""
    if not authorization:
        return None
    token = authorization.removeprefix("Bearer ").strip()
    if not token:
        return None
    return "key-" + sha256_hex(token.encode())[:16]


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def identify(ctx: RequestContext) -> None:
    """Fill `ctx.identity` and `ctx.task`; schedule removal of task fields from metadata."""
    headers = ctx.headers
    ctx.identity = identity_of(ctx.principal, headers)
    # Read by the policy stage; checked here, with every other name a client gives.
    check_header(headers.get("x-task-step-kind"), "x-task-step-kind", MAX_NAME)
    check_header(headers.get("x-farebox-tags"), "x-farebox-tags", MAX_TAGS)
    metadata = ctx.body.get("metadata")
    meta = metadata if isinstance(metadata, dict) else {}
    task_id = _named(headers, meta, "task_id", MAX_TASK_ID)
    step = _named(headers, meta, "task_step", MAX_TASK_STEP)
    done = _truthy(headers.get("x-task-done", meta.get("task_done", "")))
    ctx.task = TaskRef(
        task_id=task_id or f"task-{ctx.request_id.removeprefix('req-')}",
        step=step,
        done=done or not task_id,
        implicit=not task_id,
    )
    if meta and any(key in meta for key in TASK_KEYS):
        rest = {k: v for k, v in meta.items() if k not in TASK_KEYS}
        if rest:
            ctx.edits.set_fields["metadata"] = rest
        else:
            ctx.edits.remove.add("metadata")


def identity_of(principal: Principal, headers: dict[str, str]) -> Identity:
    """Who the request bills; with a key, also pins `headers` to the identity in force."""
    if not principal.is_key:
        return Identity(
            caller=caller_id(headers.get("authorization")),
            team=check_header(headers.get(TEAM), TEAM, MAX_NAME),
            project=check_header(headers.get(PROJECT), PROJECT, MAX_NAME),
        )
    asked = {name: check_header(headers.get(name), name, MAX_NAME) for name in IDENTITY_HEADERS}
    own = _own_identity(principal)
    if not principal.may_set_identity:
        _refuse_changes(asked, own)
    chosen = {name: asked[name] or own[name] for name in IDENTITY_HEADERS}
    for name, value in chosen.items():  # what policy rules match on, as billed
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return Identity(caller=principal.caller, team=chosen[TEAM], project=chosen[PROJECT])


def _own_identity(principal: Principal) -> dict[str, str | None]:
    plan = principal.key.attributes.plan if principal.key is not None else None
    return {TEAM: principal.team, PROJECT: principal.project, PLAN: plan}


def _refuse_changes(asked: dict[str, str | None], own: dict[str, str | None]) -> None:
    """A 403 naming the first identity header that differs from the key's own value."""
    for name, value in asked.items():
        if value is not None and value != own[name]:
            held = f"'{own[name]}'" if own[name] is not None else "none"
            raise PermissionDeniedError(
                f"this key may not set {name} (its own value is {held}); send the key's "
                "own value or leave the header out, or use a service key to act for others",
                param=name,
                code="identity_header_not_allowed",
            )


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


_HEADER_OF = {key: "x-" + key.replace("_", "-") for key in TASK_KEYS}  # `x-task-id`, ...


def _named(headers: dict[str, str], meta: dict[str, Any], key: str, limit: int) -> str | None:
    """The `X-Task-...` header, else `metadata.<key>`, each checked where it was given."""
    header = _HEADER_OF[key]
    from_header = check_header(headers.get(header), header, limit)
    from_body = _str(meta.get(key))
    if from_body is not None:
        check_identifier(from_body, f"metadata.{key}", limit)
    return from_header or from_body
