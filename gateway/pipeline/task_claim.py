"""Stage 2b: a task id belongs to the team that first used it.

With a virtual key, the first request (or `POST /v1/tasks/{id}/finish`) naming a task id
claims it in shared state for the caller's team (`team:<name>`), or for the key itself
when the key has no team (`key:<id>`); a request of another team naming that task is
refused with a 403 `task_not_owned` before anything reaches the upstream or the ledger.
The claim is one atomic `SET NX GET` in Redis, so two replicas never both win it.

Open mode and the admin key claim nothing (headers are believed there). Requests without
a task id are tasks of their own, named from the request id (128 random bits), and are
not claimed. What holds while Redis is away is in docs/security.md.
"""

from __future__ import annotations

from gateway.auth.principal import Principal
from gateway.errors import PermissionDeniedError
from gateway.pipeline.context import Identity, RequestContext
from gateway.state import SharedState

OWNER = "owner"
CLAIM_TTL_S = 30 * 24 * 3600.0
"""How long a claim lasts from the task's first request: a task id used again after that
(or after Redis lost its data) is claimed afresh by its next user."""


def task_owner(principal: Principal, identity: Identity) -> str | None:
    """The owner a task claim names for this caller; None where tasks are not scoped."""
    if not principal.is_key or principal.caller is None:
        return None
    return f"team:{identity.team}" if identity.team is not None else f"key:{principal.caller}"


async def claim(state: SharedState, task_id: str, owner: str, param: str) -> None:
    """Claim `task_id` for `owner`, or raise a 403 naming `param` if another owner has it."""
    held = await state.claim_task_value(task_id, OWNER, owner, CLAIM_TTL_S)
    if held != owner:
        raise PermissionDeniedError(
            f"task '{task_id}' belongs to another team; name your tasks with ids of your own",
            param=param,
            code="task_not_owned",
        )


async def claim_task(ctx: RequestContext, state: SharedState) -> None:
    """Claim the request's task for the caller's team (a 403 if it is another team's)."""
    owner = task_owner(ctx.principal, ctx.identity)
    if owner is None or ctx.task is None or ctx.task.implicit:
        return
    param = "x-task-id" if ctx.headers.get("x-task-id") else "metadata.task_id"
    await claim(state, ctx.task.task_id, owner, param)
