"""Stages 2b-3b of every pipeline: claim the request's task, then plan the request.

Chat, Messages, Responses and completions share them:

    decision = plan_now(ctx, services) or await plan_task(ctx, services)

Most requests name no task (each is a task of its own, named from its request id), so
nothing of theirs is in shared state: `plan_now` plans them by a plain call, with no
coroutine created or awaited. A named task has its owner and its pinned effort there:
`plan_task` claims it for the caller's team (`task_claim`) and plans it with that effort.
"""

from __future__ import annotations

from gateway.pipeline.context import RequestContext
from gateway.pipeline.policy import apply_policy
from gateway.pipeline.task_claim import claim_task
from gateway.policy.decision import Decision
from gateway.services import Services


def plan_now(ctx: RequestContext, services: Services) -> Decision | None:
    """The policy's decision for a request without a named task; None for a named one."""
    assert ctx.task is not None
    if not ctx.task.implicit:
        return None
    return apply_policy(ctx, services.config, services.prices)


async def plan_task(ctx: RequestContext, services: Services) -> Decision:
    """Claim the named task (a 403 if another team's), then plan it; pin its first effort
    when its rule says so."""
    assert ctx.task is not None and not ctx.task.implicit
    await claim_task(ctx, services.state)  # a task id belongs to the team that first used it
    task = ctx.task.task_id
    pinned = await services.state.task_value(task, "effort")
    decision = apply_policy(ctx, services.config, services.prices, task_effort=pinned)
    if decision.pin_effort and decision.effort and pinned is None:
        ttl = services.config.tasks.idle_timeout_s * 2
        await services.state.pin_task_value(task, "effort", decision.effort, ttl)
    return decision
