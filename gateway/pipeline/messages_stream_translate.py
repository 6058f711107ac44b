"""A chat-completions stream as Anthropic Messages events (pure: chunks in, events out).

Each event is told as its bytes and the object they hold (`Told`): the relay meters the
object, so nothing it sends is parsed back.

`message_start` goes out with the first chunk, carrying the gateway's own count of the
prompt (a chat stream reports usage only at its end, and Claude Code shows cost from
`message_start`: it must not say 0). Reasoning (`reasoning_content`), text and each tool
call become content blocks in the order they arrive; tool arguments pass through as
`input_json_delta`. The finish reason and the upstream's final usage (asked for with
`stream_options.include_usage`) go out in `message_delta` at `[DONE]`, then `message_stop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.pipeline.messages_translate import as_object, message_id, stop_of, usage_of

Told = tuple[bytes, dict[str, Any]]
"""An event as it goes out, and the object its data holds."""


def told(kind: str, payload: dict[str, Any]) -> Told:
    """One Anthropic SSE event, with its object."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n", payload


@dataclass(slots=True)
class StreamTranslator:
    """Turns parsed chat chunks into Anthropic events, one chunk at a time."""

    model: str
    input_estimate: int  # the gateway's prompt count, for message_start
    stops: list[str] | None = None
    started: bool = False
    block: int = -1  # index of the open content block; -1: none open
    kind: str | None = None  # "thinking", "text" or "tool_use"
    tools: dict[int, int] = field(default_factory=dict)  # chat tool index -> block index
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: dict[str, int] | None = None
    done: bool = False

    def feed(self, chunk: dict[str, Any]) -> list[Told]:
        """The events for one chat chunk (a chunk may open and close blocks)."""
        out: list[Told] = []
        if not self.started:
            out.append(self._start(chunk))
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk["usage"])
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return out
        delta = as_object(choice.get("delta"))
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out += self._text("thinking", reasoning)
        if isinstance(delta.get("content"), str) and delta["content"]:
            out += self._text("text", delta["content"])
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                out += self._tool(call)
        if choice.get("finish_reason") is not None:
            self.stop_reason, self.stop_sequence = stop_of(choice, self.stops)
            out += self._close()
        return out

    def finish(self) -> list[Told]:
        """The closing events, at the upstream's `[DONE]`."""
        if self.done:
            return []
        self.done = True
        out = [] if self.started else [self._start({})]
        out += self._close()
        usage = self.usage or usage_of(None) | {"input_tokens": self.input_estimate}
        delta = {"stop_reason": self.stop_reason or "end_turn", "stop_sequence": self.stop_sequence}
        out.append(told("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(told("message_stop", {"type": "message_stop"}))
        return out

    def _start(self, chunk: dict[str, Any]) -> Told:
        self.started = True
        message: dict[str, Any] = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_of(None) | {"input_tokens": self.input_estimate, "output_tokens": 1},
        }
        return told("message_start", {"type": "message_start", "message": message})

    def _open(self, kind: str, block: dict[str, Any]) -> list[Told]:
        out = self._close()
        self.block += 1
        self.kind = kind
        start = {"type": "content_block_start", "index": self.block, "content_block": block}
        return [*out, told("content_block_start", start)]

    def _close(self) -> list[Told]:
        if self.kind is None:
            return []
        self.kind = None
        return [told("content_block_stop", {"type": "content_block_stop", "index": self.block})]

    def _text(self, kind: str, text: str) -> list[Told]:
        out: list[Told] = []
        if self.kind != kind:
            empty = {"type": kind, kind: ""} | ({"signature": ""} if kind == "thinking" else {})
            out = self._open(kind, empty)
        delta = {"type": f"{kind}_delta", kind: text}
        event = {"type": "content_block_delta", "index": self.block, "delta": delta}
        return [*out, told("content_block_delta", event)]

    def _tool(self, call: dict[str, Any]) -> list[Told]:
        out: list[Told] = []
        position = call.get("index", 0)
        function = as_object(call.get("function"))
        if position not in self.tools:
            block = {"type": "tool_use", "id": call.get("id"), "name": function.get("name")}
            out = self._open("tool_use", block | {"input": {}})
            self.tools[position] = self.block
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            event = {"type": "content_block_delta", "index": self.tools[position], "delta": delta}
            out.append(told("content_block_delta", event))
        return out


def error_event(payload: dict[str, Any]) -> Told:
    """A chat stream's in-band error as Anthropic's `error` event."""
    error = payload.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    body = {"type": "api_error", "message": str(message or "upstream error")}
    return told("error", {"type": "error", "error": body})
