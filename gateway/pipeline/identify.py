"""Stage 2: who is calling, and which task and step this request belongs to.

The task comes from `X-Task-Id` / `X-Task-Step` / `X-Task-Done` headers or from the body's
`metadata.task_id` / `metadata.task_step`, which are removed before forwarding. Without a
task id the request is a task of its own. Team and project come from headers until keys
carry them. Every name is checked by `gateway.pipeline.identifiers` (a 400 naming the
header or field), so what reaches the ledger, shared state and logs is printable and short.
"""

from __future__ import annotations

import hashlib
from typing import Any

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


def caller_id(authorization: str | None) -> str | None:
    """A stable, non-reversible id for the caller's key (the key itself is never kept)."""
    if not authorization:
        return None
    token = authorization.removeprefix("Bearer ").strip()
    if not token:
        return None
    return "key-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def identify(ctx: RequestContext) -> None:
    """Fill `ctx.identity` and `ctx.task`; schedule removal of task fields from metadata."""
    headers = ctx.headers
    ctx.identity = Identity(
        caller=caller_id(headers.get("authorization")),
        team=check_header(headers.get("x-farebox-team"), "x-farebox-team", MAX_NAME),
        project=check_header(headers.get("x-farebox-project"), "x-farebox-project", MAX_NAME),
    )
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
    if any(key in meta for key in TASK_KEYS):
        rest = {k: v for k, v in meta.items() if k not in TASK_KEYS}
        if rest:
            ctx.edits.set_fields["metadata"] = rest
        else:
            ctx.edits.remove.add("metadata")


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _named(headers: dict[str, str], meta: dict[str, Any], key: str, limit: int) -> str | None:
    """The `X-Task-...` header, else `metadata.<key>`, each checked where it was given."""
    header = "x-" + key.replace("_", "-")
    from_header = check_header(headers.get(header), header, limit)
    from_body = _str(meta.get(key))
    if from_body is not None:
        check_identifier(from_body, f"metadata.{key}", limit)
    return from_header or from_body
