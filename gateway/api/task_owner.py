"""`POST /v1/tasks/{id}/finish` for the task's own team only.

The finishing key claims the task for its team the way a chat request does
(`gateway.pipeline.task_claim`), so a task finished before its first request stays with
the team that finished it; and the ledger's `tasks.team` (the team of the task's first
booked request) must be the caller's too, which holds where the claim was lost (Redis
restarted empty, or the claim expired).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request

from gateway.auth.principal import principal_of
from gateway.errors import PermissionDeniedError
from gateway.ledger import get_task
from gateway.pipeline.identify import identity_of
from gateway.pipeline.task_claim import claim, task_owner
from gateway.state import SharedState

DEFAULT_TEAM = "default"
"""The team the ledger books a request without one under (`gateway.pipeline.record`)."""


async def check_finisher(
    request: Request, task_id: str, state: SharedState, ledger: AsyncEngine
) -> None:
    """Refuse (403 `task_not_owned`) a key finishing a task of another team."""
    principal = principal_of(request.scope)
    identity = identity_of(principal, dict(request.headers))  # spoofed headers: a 403 too
    owner = task_owner(principal, identity)
    if owner is None:
        return  # open mode or the admin key
    await claim(state, task_id, owner, "task_id")
    detail = await get_task(ledger, task_id)
    booked = detail.task.team if detail is not None else None
    if booked is not None and booked != (identity.team or DEFAULT_TEAM):
        raise PermissionDeniedError(
            f"task '{task_id}' belongs to another team; only its own team may finish it",
            param="task_id",
            code="task_not_owned",
        )
