"""The ring buffer of received requests that tests read back through /sim/requests."""

from __future__ import annotations

import base64
import hashlib
import itertools
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "proxy-authorization"})


def redact(value: str) -> str:
    """Replace a secret header value by a short, comparable digest."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def logged_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-case header names, join repeats with commas, and redact secrets."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in raw:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name in SECRET_HEADERS:
            value = redact(value)
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


@dataclass
class RequestRecord:
    """One received request and what the simulator did with it."""

    id: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    model: str | None = None
    stream: bool = False
    service_tier: str | None = None
    speed: str | None = None  # the decode speed served: "fast" (fast mode / priority) or not
    status: int | None = None
    fault: bool = False
    cancelled: bool = False
    dropped: bool = False
    completed: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    planned_prefill_ms: float = 0.0
    planned_decode_ms: float = 0.0
    queued_ms: float = 0.0  # waited for a seat (capacity model) before the prefill

    def to_json(self) -> dict[str, Any]:
        """Return the record as JSON, the body as base64 of the exact bytes received."""
        data = asdict(self)
        data["body_b64"] = base64.b64encode(data.pop("body")).decode("ascii")
        return data


class RequestLog:
    """A bounded, in-order log of requests; the oldest fall off when it is full."""

    def __init__(self, size: int) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=size)
        self._ids = itertools.count(1)

    def open(
        self, method: str, path: str, raw_headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> RequestRecord:
        """Start a record for a request that has just been read."""
        record = RequestRecord(
            id=next(self._ids),
            method=method,
            path=path,
            headers=logged_headers(raw_headers),
            body=body,
            received_at=time.time(),
        )
        self._records.append(record)
        return record

    def records(self) -> list[RequestRecord]:
        """Return the records, oldest first."""
        return list(self._records)

    def clear(self) -> None:
        """Drop every record."""
        self._records.clear()
