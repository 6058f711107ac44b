"""The Responses API's stored responses: what `previous_response_id` continues, and what
`GET` and `DELETE /v1/responses/{id}` read and remove.

A response the gateway served (unless the client sent `store: false`) is kept for
`FAREBOX_RESPONSES_TTL_S` as one JSON value: the whole conversation it ended (input
items, earlier turns included, then its output items), the Response object the client
received, the task it belonged to and who made it. It lives in the shared state (Redis,
or per process), through the task-value calls every backend has, so every replica can
continue, read or delete a chain. A deleted response is gone: no read, no continuation.

Who may use a kept response (`readable_by`): with a virtual key, the owner a task claim
names (`team:<name>`, or `key:<id>` for a key without a team), so another team's key gets
the 404 an unknown id gets; in the open mode, the caller (a hash of the bearer token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.state.base import SharedState

_PREFIX = "response:"
_NAME = "chain"


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One kept response: its conversation, task, owner and (since GET) the object sent.

    `inputs` is how many of `items` were its input (the rest are its output);
    `scope` the task-claim owner of its maker (None in the open mode).
    """

    items: list[dict[str, Any]]
    task_id: str
    owner: str | None
    scope: str | None = None
    response: dict[str, Any] | None = None
    inputs: int | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {"items": self.items, "task": self.task_id, "owner": self.owner}
        if self.scope is not None:
            data["scope"] = self.scope
        if self.response is not None:
            data["response"] = self.response
        if self.inputs is not None:
            data["inputs"] = self.inputs
        return orjson.dumps(data).decode()

    @classmethod
    def from_json(cls, text: str) -> StoredResponse | None:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            return None
        owner, scope, response = data.get("owner"), data.get("scope"), data.get("response")
        inputs = data.get("inputs")
        return cls(
            data["items"],
            str(data.get("task") or ""),
            owner if isinstance(owner, str) else None,
            scope if isinstance(scope, str) else None,
            response if isinstance(response, dict) else None,
            inputs if isinstance(inputs, int) and not isinstance(inputs, bool) else None,
        )

    @property
    def input_items(self) -> list[dict[str, Any]]:
        """The items this response was made from (earlier turns of its chain included)."""
        return self.items[: self.inputs] if self.inputs is not None else []

    def readable_by(self, scope: str | None, caller: str | None) -> bool:
        """Whether a caller of task-claim owner `scope` (None: open mode) may use it."""
        if self.scope is not None:
            return scope is None or scope == self.scope  # None: open mode or the admin key
        return self.owner is None or self.owner == caller


class ResponseStore:
    """Keeps, finds and deletes stored responses by id in a `SharedState`."""

    def __init__(self, state: SharedState, ttl_s: float) -> None:
        self._state, self._ttl_s = state, ttl_s

    async def save(self, response_id: str, stored: StoredResponse) -> None:
        """Keep a response for the store's time (the first save of an id wins)."""
        await self._state.pin_task_value(
            _PREFIX + response_id, _NAME, stored.to_json(), self._ttl_s
        )

    async def load(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None when unknown, deleted or expired."""
        text = await self._state.task_value(_PREFIX + response_id, _NAME)
        return StoredResponse.from_json(text) if text else None

    async def delete(self, response_id: str) -> bool:
        """Forget a kept response; return whether one was kept."""
        return await self._state.forget_task_value(_PREFIX + response_id, _NAME)
