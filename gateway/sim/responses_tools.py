"""The simulator's /v1/responses calls the tools it is offered, by a plan the request sets.

`metadata.sim_tool_rounds` (a number, default 0) is how many tool calls the simulated
model makes after the last user message before it answers in text: with 2, an agent
loop runs call -> tool -> call -> tool -> answer. `tool_choice: required` (or a named
function) calls a tool whatever the plan says. The tool is the named one, else the
first function offered; its arguments are filled deterministically from its JSON schema
(required properties: strings "sample", numbers 1, booleans true), so runs repeat.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from gateway import tokens
from gateway.sim.openai_wire import ChatJob
from gateway.sim.timing import Pacer
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.upstream.responses_wire import response_from_chat
from gateway.usage import Usage

_SAMPLES: dict[str, Any] = {"string": "sample", "integer": 1, "number": 1, "boolean": True}


def _rounds(body: dict[str, Any]) -> int:
    metadata = body.get("metadata")
    value = metadata.get("sim_tool_rounds") if isinstance(metadata, dict) else None
    try:
        return max(int(value), 0) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def _calls_since_user(items: list[dict[str, Any]]) -> int:
    count = 0
    for item in reversed(items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            break
        count += item.get("type") == "function_call_output"
    return count


def tool_to_call(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The function tool the simulated model calls now, or None when it answers in text."""
    tools = [
        t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"
    ]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict) and choice.get("type") == "function":
        named = [t for t in tools if t.get("name") == choice.get("name")]
        return named[0] if named else None
    if choice == "required" or _calls_since_user(items) < _rounds(body):
        return tools[0]
    return None


def arguments_for(tool: dict[str, Any]) -> str:
    """Deterministic arguments that satisfy the tool's required properties."""
    raw = tool.get("parameters")
    schema: dict[str, Any] = raw if isinstance(raw, dict) else {}
    raw = schema.get("properties")
    properties: dict[str, Any] = raw if isinstance(raw, dict) else {}
    arguments = {
        name: _SAMPLES.get(str((properties.get(name) or {}).get("type")), "sample")
        for name in schema.get("required") or []
    }
    return orjson.dumps(arguments).decode()


class ToolCall:
    """One planned call: its chat-shaped message, usage and Responses renderings."""

    def __init__(self, job: ChatJob, tool: dict[str, Any]) -> None:
        self.job = job
        self.name = str(tool.get("name") or "")
        self.arguments = arguments_for(tool)
        self.call_id = f"call_{uuid.uuid4().hex[:24]}"
        output = tokens.count_tokens(self.name + self.arguments) + 1
        self.usage = Usage(
            prompt_tokens=job.prompt_tokens,
            cached_tokens=job.cached_tokens,
            completion_tokens=output,
        )

    def _call(self, arguments: str, first: bool) -> dict[str, Any]:
        function = {"arguments": arguments} | ({"name": self.name} if first else {})
        return {
            "index": 0,
            "id": self.call_id if first else None,
            "type": "function",
            "function": function,
        }

    def whole(self, body: dict[str, Any], response_id: str) -> dict[str, Any]:
        """The Response object of a call."""
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [self._call(self.arguments, True)],
        }
        reply = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
        return response_from_chat(body, reply, self.usage, response_id)

    async def events(
        self, body: dict[str, Any], response_id: str, finished: Any
    ) -> AsyncGenerator[bytes, None]:
        """The call as the Responses event stream, its arguments in two deltas."""
        teller = ChatToResponses(body, response_id, int(time.time()))
        for event in teller.start():
            yield sse(event)
        pacer = Pacer(self.job.timing)
        await pacer.prefill()
        half = len(self.arguments) // 2
        for index, piece in enumerate((self.arguments[:half], self.arguments[half:])):
            await pacer.token(index)
            chunk = {
                "choices": [{"index": 0, "delta": {"tool_calls": [self._call(piece, index == 0)]}}]
            }
            for event in teller.feed(chunk):
                yield sse(event)
        teller.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        for event in teller.finish(self.usage):
            yield sse(event)
        finished(teller.output)
