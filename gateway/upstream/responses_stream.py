"""A chat-completions stream, re-told as the Responses API's typed event stream (pure).

    response.created, response.in_progress
    per output item, in the order the chat deltas open them:
      reasoning:     output_item.added, reasoning_text.delta..., reasoning_text.done,
                     output_item.done
      message:       output_item.added, content_part.added, output_text.delta...,
                     output_text.done, content_part.done, output_item.done
      function_call: output_item.added, function_call_arguments.delta...,
                     function_call_arguments.done, output_item.done
    response.completed (or response.incomplete at a length cut), with usage

An item's id is the same in its `added` and `done` events and in the final Response, as
the openai SDK's stream accumulator checks. Every event carries a `sequence_number`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.upstream.responses_wire import (
    function_call_item,
    message_item,
    new_id,
    reasoning_item,
    reasoning_of,
    response_object,
    responses_usage,
    status_of,
)
from gateway.usage import Usage


def sse(payload: dict[str, Any]) -> bytes:
    """One Responses event on the wire: `event:` names its type, `data:` holds it."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass(slots=True)
class _Open:
    """The output item being streamed now."""

    kind: str  # reasoning | message | function_call
    index: int
    item_id: str
    text: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    tool_index: int | None = None


class ChatToResponses:
    """Feeds on chat chunks (parsed), gives Responses events (parsed; `sse` encodes them)."""

    def __init__(self, native: dict[str, Any], response_id: str, created_at: int) -> None:
        self._native, self.response_id, self._created = native, response_id, created_at
        self._seq = 0
        self._open: _Open | None = None
        self.output: list[dict[str, Any]] = []
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _response(
        self, status: str, usage: dict[str, Any] | None, incomplete: str | None = None
    ) -> dict[str, Any]:
        return response_object(
            self._native,
            response_id=self.response_id,
            output=list(self.output),
            usage=usage,
            status=status,
            incomplete=incomplete,
            created_at=self._created,
        )

    def start(self) -> list[dict[str, Any]]:
        """The opening events."""
        response = self._response("in_progress", None)
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events one chat chunk stands for."""
        events: list[dict[str, Any]] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict):
                continue
            raw_delta = choice.get("delta")
            delta: dict[str, Any] = raw_delta if isinstance(raw_delta, dict) else {}
            thought = reasoning_of(delta)
            if thought:
                events += self._text("reasoning", thought)
            content = delta.get("content")
            if isinstance(content, str) and content:
                events += self._text("message", content)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    events += self._tool_delta(call)
            if isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
                self.finish_reason = choice["finish_reason"]
        return events

    def finish(self, usage: Usage | None) -> list[dict[str, Any]]:
        """Close the open item and end with response.completed (or .incomplete)."""
        events = self._close()
        status, incomplete = status_of(self.finish_reason)
        shaped = responses_usage(usage) if usage is not None else None
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=self._response(status, shaped, incomplete))]

    def _open_item(self, kind: str, item: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
        events = self._close()
        index = len(self.output)
        self._open = _Open(kind, index, item["id"], **extra)
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        return events

    def _text(self, kind: str, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open.kind != kind:
            if kind == "message":
                item = message_item("", status="in_progress")
                item["content"] = []
                events += self._open_item(kind, item)
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                events.append(self._part_event("response.content_part.added", part))
            else:
                item = reasoning_item("")
                item["content"] = []
                events += self._open_item(kind, item)
        assert self._open is not None
        self._open.text.append(text)
        name = (
            "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        )
        extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
        return [*events, self._part_event(name, None, delta=text, **extra)]

    def _part_event(self, kind: str, part: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
        assert self._open is not None
        located = {"item_id": self._open.item_id, "output_index": self._open.index}
        if part is not None:
            fields["part"] = part
        return self._event(kind, **located, content_index=0, **fields)

    def _tool_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        raw = call.get("function")
        function: dict[str, Any] = raw if isinstance(raw, dict) else {}
        position = call.get("index")
        current = self._open
        if (
            current is None
            or current.kind != "function_call"
            or (position is not None and position != current.tool_index)
        ):
            call_id = str(call.get("id") or new_id("call"))
            name = str(function.get("name") or "")
            item = function_call_item(call_id, name, "", status="in_progress")
            events += self._open_item(
                "function_call", item, call_id=call_id, name=name, tool_index=position
            )
        assert self._open is not None
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            self._open.text.append(piece)
            located = {"item_id": self._open.item_id, "output_index": self._open.index}
            events.append(
                self._event("response.function_call_arguments.delta", **located, delta=piece)
            )
        return events

    def _close(self) -> list[dict[str, Any]]:
        current, self._open = self._open, None
        if current is None:
            return []
        text = "".join(current.text)
        located = {"item_id": current.item_id, "output_index": current.index}
        events: list[dict[str, Any]] = []
        if current.kind == "message":
            item = message_item(text, current.item_id)
            part = item["content"][0]
            events.append(
                self._event(
                    "response.output_text.done", **located, content_index=0, text=text, logprobs=[]
                )
            )
            events.append(
                self._event("response.content_part.done", **located, content_index=0, part=part)
            )
        elif current.kind == "reasoning":
            item = reasoning_item(text, current.item_id)
            events.append(
                self._event("response.reasoning_text.done", **located, content_index=0, text=text)
            )
        else:
            item = function_call_item(current.call_id, current.name, text, current.item_id)
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    **located,
                    name=current.name,
                    arguments=text,
                )
            )
        self.output.append(item)
        events.append(
            self._event("response.output_item.done", output_index=current.index, item=item)
        )
        return events
