"""Stored responses: `GET` and `DELETE /v1/responses/{id}`, `GET .../input_items`.

Served from the gateway's own store (`gateway.state.responses`), whatever route made the
response, `wire: responses` upstreams included: the gateway expands `previous_response_id`
itself and sends upstreams stateless requests, so its store is the one that holds the
chain, with the caller's scope (another team's response is the 404 an unknown one gets).
A response made with `store: false`, deleted, or older than `FAREBOX_RESPONSES_TTL_S` is
a 404. Nothing here calls an upstream or books a ledger row.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from gateway.api.deps import ServicesDep
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError, InvalidRequestError
from gateway.pipeline.identify import identity_of
from gateway.pipeline.task_claim import task_owner
from gateway.services import Services
from gateway.state.responses import ResponseStore, StoredResponse

router = APIRouter()
MAX_ID = 256
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
Includes = Annotated[list[str] | None, Query(description="Accepted; nothing more to include.")]


class ResponseNotFoundError(FareboxError):
    """OpenAI's 404 for a response id it does not have (for this caller)."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "response_not_found"


async def _find(request: Request, services: Services, response_id: str) -> StoredResponse:
    """The caller's kept response, or the 404 an unknown id gets."""
    if len(response_id) <= MAX_ID:
        stored = await _store(services).load(response_id)
        principal = principal_of(request.scope)
        identity = identity_of(principal, dict(request.headers))
        if stored is not None and stored.readable_by(
            task_owner(principal, identity), identity.caller
        ):
            return stored
    raise ResponseNotFoundError(
        f"Response with id '{response_id[:MAX_ID]}' not found.", param="response_id"
    )


def _store(services: Services) -> ResponseStore:
    return ResponseStore(services.state, services.settings.responses_ttl_s)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    response_id: str,
    request: Request,
    services: ServicesDep,
    include: Includes = None,
    stream: Annotated[bool, Query(description="Not supported: no background runs.")] = False,
) -> dict[str, Any]:
    """The Response object as the client received it (`client.responses.retrieve`)."""
    if stream:
        raise InvalidRequestError(
            "stream=true replays a background response; Farebox runs none: retrieve without stream",
            param="stream",
        )
    stored = await _find(request, services, response_id)
    if stored.response is None:  # kept before the gateway kept the object itself
        raise ResponseNotFoundError(
            f"Response with id '{response_id}' not found.", param="response_id"
        )
    return stored.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    response_id: str, request: Request, services: ServicesDep
) -> dict[str, Any]:
    """Forget a kept response: no later read, no later `previous_response_id`."""
    await _find(request, services, response_id)
    await _store(services).delete(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    request: Request,
    services: ServicesDep,
    include: Includes = None,
    after: Annotated[str | None, Query(description="List items after this item id.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
) -> dict[str, Any]:
    """The items the response was made from, earlier turns of its chain included."""
    stored = await _find(request, services, response_id)
    items = [_listed(item, response_id, i) for i, item in enumerate(stored.input_items)]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequestError(f"after: no item '{after[:MAX_ID]}' in this list")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _listed(item: dict[str, Any], response_id: str, index: int) -> dict[str, Any]:
    """An input item in the listing's shape: typed, with an id, text content as parts."""
    kind = item.get("type") or "message"
    out = dict(item)
    out["id"] = item.get("id") or _item_id(kind, response_id, index)
    out["type"] = kind
    content = item.get("content")
    if kind == "message" and isinstance(content, str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        out["content"] = [{"type": part, "text": content}]
    return out


def _item_id(kind: str, response_id: str, index: int) -> str:
    """A stable id for an item the client sent without one (the same on every listing)."""
    digest = hashlib.sha256(f"{response_id}\0{index}".encode()).hexdigest()[:32]
    return f"{_ID_PREFIXES.get(kind, 'item')}_{digest}"
