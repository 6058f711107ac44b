"""Who may read which ledger rows: the principal and its filters become a `ReadScope`.

* The open mode, the admin key and a finance key see every team; `team` and `project`
  filters narrow what they read.
* A key with a team sees that team's rows (every project of it). Naming another team in a
  filter is a 403 naming the filter, not an empty answer: the key learns nothing either way,
  and the caller learns its mistake.
* A key without a team sees the rows it made itself (the ledger's `caller` is its id); its
  filters only narrow those.

The scope is applied inside the ledger's SQL (`gateway.ledger.scope`). See docs/security.md,
"Who sees what".
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from gateway.auth.principal import Principal, principal_of
from gateway.errors import PermissionDeniedError
from gateway.ledger.scope import ReadScope
from gateway.pipeline.identifiers import MAX_NAME, check_identifier


def scope_for(
    principal: Principal, team: str | None = None, project: str | None = None
) -> ReadScope:
    """The rows `principal` may read, narrowed by the `team` and `project` filters."""
    if principal.sees_all:
        return ReadScope(team=team, project=project)
    if principal.team is None:
        return ReadScope(team=team, project=project, caller=principal.caller)
    if team is not None and team != principal.team:
        raise PermissionDeniedError(
            f"team={team}: this key reads its own team's data only ({principal.team}); "
            "drop the filter or ask for a finance key",
            param="team",
            code="team_not_allowed",
        )
    return ReadScope(team=principal.team, project=project)


async def request_scope(request: Request) -> ReadScope:
    """The rows the request's principal may read, with no filter (single-resource reads).

    Async, as every dependency here: FastAPI runs a plain `def` one in its thread pool.
    """
    return scope_for(principal_of(request.scope))


async def filtered_scope(
    request: Request,
    team: Annotated[str | None, Query(description="Only this team's rows.")] = None,
    project: Annotated[str | None, Query(description="Only this project's rows.")] = None,
) -> ReadScope:
    """The rows the request's principal may read, narrowed by `team=` and `project=`."""
    if team is not None:
        check_identifier(team, "team", MAX_NAME)
    if project is not None:
        check_identifier(project, "project", MAX_NAME)
    return scope_for(principal_of(request.scope), team, project)


ScopeDep = Annotated[ReadScope, Depends(request_scope)]
FilteredScopeDep = Annotated[ReadScope, Depends(filtered_scope)]
