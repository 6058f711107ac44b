"""The Responses API's stored responses: what `previous_response_id` continues.

A response the gateway served (unless the client sent `store: false`) is kept for
`FAREBOX_RESPONSES_TTL_S` as one JSON value: the whole conversation it ended (input
items, earlier turns included, then its output items), the task it belonged to and the
caller who made it. It lives in the shared state (Redis, or per process), through the
task-value calls every backend has, so every replica can continue a chain.
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
    """One kept response: its conversation, task and owner."""

    items: list[dict[str, Any]]
    task_id: str
    owner: str | None

    def to_json(self) -> str:
        return orjson.dumps(
            {"items": self.items, "task": self.task_id, "owner": self.owner}
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> StoredResponse | None:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            return None
        owner = data.get("owner")
        return cls(
            data["items"], str(data.get("task") or ""), owner if isinstance(owner, str) else None
        )


class ResponseStore:
    """Keeps and finds stored responses by id in a `SharedState`."""

    def __init__(self, state: SharedState, ttl_s: float) -> None:
        self._state, self._ttl_s = state, ttl_s

    async def save(self, response_id: str, stored: StoredResponse) -> None:
        """Keep a response for the store's time (the first save of an id wins)."""
        await self._state.pin_task_value(
            _PREFIX + response_id, _NAME, stored.to_json(), self._ttl_s
        )

    async def load(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None when unknown or expired."""
        text = await self._state.task_value(_PREFIX + response_id, _NAME)
        return StoredResponse.from_json(text) if text else None
