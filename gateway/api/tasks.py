"""Tasks: finish one, read one (its cost breakdown, tokens, requests, TTFT, status)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import Convertor, register_url_convertor

from gateway.api.deps import LedgerDep, ServicesDep
from gateway.api.jsonable import jsonable
from gateway.api.read_scope import ScopeDep
from gateway.api.task_owner import check_finisher
from gateway.errors import FareboxError, InvalidRequestError
from gateway.ledger import TaskDetail, get_task
from gateway.ledger.records import ABANDONED, OPEN
from gateway.pipeline.identifiers import MAX_OUTCOME, MAX_TASK_ID, check_identifier

router = APIRouter()


class TaskIdConvertor(Convertor[str]):
    """A task id as sent: any characters, `/` (as %2F) and line breaks included.

    Starlette's `path` matches no line break, so `task%0Aone` was a bare 404; here every
    id reaches the route, and `check_identifier` answers the 400 that names it.
    """

    regex = r"(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("task_id", TaskIdConvertor())


class TaskNotFoundError(FareboxError):
    status_code = 404
    error_type = "not_found_error"
    code = "task_not_found"


class FinishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: str = Field(default="success", min_length=1, max_length=64)


@router.post("/v1/tasks/{task_id:task_id}/finish")  # ids may hold `/` (sent as %2F)
async def finish_task(
    task_id: str, body: FinishRequest, request: Request, services: ServicesDep, ledger: LedgerDep
) -> dict[str, Any]:
    """Mark a task finished with an outcome (`success`, `failed`, ...); its own team only."""
    check_identifier(task_id, "task_id", MAX_TASK_ID)
    check_identifier(body.outcome, "outcome", MAX_OUTCOME)
    await check_finisher(request, task_id, services.state, ledger)
    try:
        services.ledger.finish_task(task_id, body.outcome)
    except ValueError as exc:
        raise InvalidRequestError(str(exc), param="outcome") from exc
    return {"task_id": task_id, "outcome": body.outcome, "status": "finishing"}


@router.get("/v1/tasks/{task_id:task_id}")
async def read_task(task_id: str, ledger: LedgerDep, scope: ScopeDep) -> dict[str, Any]:
    """The task's totals and each upstream call it made; another team's task is a 404,
    word for word the one an unknown task gets."""
    check_identifier(task_id, "task_id", MAX_TASK_ID)
    detail = await get_task(ledger, task_id, scope=scope)  # caught up with this process
    if detail is None:
        raise TaskNotFoundError(f"task '{task_id}' has no recorded requests", param="task_id")
    task = jsonable(detail.task)
    task["cost"] = {
        "total": task.pop("cost_total"),
        **{name: task.pop(f"cost_{name}") for name in _COMPONENTS},
    }
    task["ended"] = ended_as(detail)
    requests = [jsonable(record) for record in detail.requests]
    return {"object": "task", **task, "requests": requests}


def ended_as(detail: TaskDetail) -> str:
    """`untasked` (a request sent without a task id), `open`, `abandoned` or `finished`."""
    task_id = detail.task.task_id
    if any(task_id == f"task-{r.request_id.removeprefix('req-')}" for r in detail.requests):
        return "untasked"
    status = detail.task.status
    return status if status in (OPEN, ABANDONED) else "finished"


_COMPONENTS = ("input", "cached", "cache_write", "output", "reasoning")
