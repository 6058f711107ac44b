"""Stage 2: who is calling, and which task and step this request belongs to.

The task comes from `X-Task-Id` / `X-Task-Step` / `X-Task-Done` headers or from the body's
`metadata.task_id` / `metadata.task_step`, which are removed before forwarding. Without a
task id the request is a task of its own. Team and project come from headers until keys
carry them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.pipeline.context import Identity, RequestContext, TaskRef

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
        team=headers.get("x-farebox-team") or None,
        project=headers.get("x-farebox-project") or None,
    )
    metadata = ctx.body.get("metadata")
    meta = metadata if isinstance(metadata, dict) else {}
    task_id = headers.get("x-task-id") or _str(meta.get("task_id"))
    step = headers.get("x-task-step") or _str(meta.get("task_step"))
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
