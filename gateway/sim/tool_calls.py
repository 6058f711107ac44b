"""The chat route calls the tools it is offered, by a plan, so agent loops run end to end.

How many tool calls the simulated model makes after the last user message before it
answers in text: the request's `metadata.sim_tool_rounds`, else the configuration's
`tool_rounds` (default 0: never, as before). With 1 an agent loop runs user -> tool call
-> tool result -> answer; with 2, two calls first. `tool_choice: "required"` (or a named
function) calls a tool whatever the plan says; `"none"` never does. The tool is the named
one, else one of the functions offered picked by the seed; its arguments fill the
schema's required properties from the same seeded generator (strings are words, an
`enum` one of its values, numbers small integers), so a run repeats exactly for a seed
and prompt. Reasoning models think first, then call.

A scripted plan (the configuration's `tool_script`) replaces the seeded one, for agents
whose tools must get real arguments (Codex's `exec_command` a command it can run): the
n-th call after the last user message is the script's n-th entry, with its arguments,
when that function is offered; past the script's end, or when it is not offered, the
model answers in text. The Messages API's route uses the same plans (`anthropic_api`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from gateway import tokens
from gateway.sim.anthropic_request import MessageParam, MessagesRequest
from gateway.sim.config import ScriptedCall
from gateway.sim.generator import pick_words
from gateway.sim.openai_request import ChatRequest


@dataclass(frozen=True)
class PlannedCall:
    """One tool call the simulated model makes instead of a text answer."""

    call_id: str
    name: str
    arguments: str

    @property
    def pieces(self) -> list[str]:
        """The arguments as streamed: one piece per token."""
        ids = tokens.encode(self.arguments)
        return [tokens.encoding().decode([token]) for token in ids] or [""]

    @property
    def output_tokens(self) -> int:
        """Tokens the call costs: its name, its arguments and a closing token."""
        return tokens.count_tokens(self.name) + len(tokens.encode(self.arguments)) + 1

    def message_call(self) -> dict[str, Any]:
        """The call as an assistant message's `tool_calls` entry."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.call_id, "type": "function", "function": function}


def _functions(request: ChatRequest) -> list[dict[str, Any]]:
    return [
        tool["function"]
        for tool in request.tools or []
        if tool.get("type") == "function" and isinstance(tool.get("function"), dict)
    ]


def planned_rounds(request: ChatRequest, default: int) -> int:
    """The request's `metadata.sim_tool_rounds`, else the configured default."""
    return _rounds((request.model_extra or {}).get("metadata"), default)


def calls_since_user(messages: list[dict[str, Any]]) -> int:
    """Assistant tool-calling turns after the last user message."""
    count = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        count += message.get("role") == "assistant" and bool(message.get("tool_calls"))
    return count


def tool_to_call(
    request: ChatRequest, default_rounds: int, rng: random.Random
) -> dict[str, Any] | None:
    """The function the model calls now, or None when it answers in text."""
    functions = _functions(request)
    choice = (request.model_extra or {}).get("tool_choice")
    if not functions or choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        named = [f for f in functions if f.get("name") == wanted]
        return named[0] if named else None
    if choice == "required" or calls_since_user(request.messages) < planned_rounds(
        request, default_rounds
    ):
        return rng.choice(functions)
    return None


def _value(schema: Any, rng: random.Random) -> Any:
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return rng.randint(1, 9)
    if kind == "boolean":
        return True
    if kind == "array":
        return [_value(schema.get("items"), rng)]
    if kind == "object":
        return arguments_of(schema, rng)
    return "".join(pick_words(rng, 2)).strip()


def arguments_of(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Values for the schema's required properties, in the schema's own order."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required") or []
    return {name: _value(properties.get(name), rng) for name in required}


def plan_call(function: dict[str, Any], rng: random.Random) -> PlannedCall:
    """The call of `function`, with deterministic arguments and id."""
    schema = function.get("parameters")
    arguments = arguments_of(schema if isinstance(schema, dict) else {}, rng)
    call_id = f"call_{rng.getrandbits(96):024x}"
    return PlannedCall(call_id, str(function.get("name") or ""), orjson.dumps(arguments).decode())


def scripted_call(
    script: list[ScriptedCall], offered: list[str], calls_made: int, rng: random.Random
) -> PlannedCall | None:
    """The script's next call when its function is offered, else None (a text answer)."""
    if calls_made >= len(script) or script[calls_made].name not in offered:
        return None
    step = script[calls_made]
    call_id = f"call_{rng.getrandbits(96):024x}"
    return PlannedCall(call_id, step.name, orjson.dumps(step.arguments).decode())


def chat_call(
    request: ChatRequest, script: list[ScriptedCall], default_rounds: int, rng: random.Random
) -> PlannedCall | None:
    """The call a chat request gets now (scripted, planned or forced), or None."""
    choice = (request.model_extra or {}).get("tool_choice")
    if script and choice in (None, "auto") and request.tools:
        offered = [str(f.get("name")) for f in _functions(request)]
        return scripted_call(script, offered, calls_since_user(request.messages), rng)
    function = tool_to_call(request, default_rounds, rng)
    return plan_call(function, rng) if function is not None else None


def _turns_since_user(messages: list[MessageParam]) -> int:
    """Assistant tool_use turns since the last user turn that is not only tool results."""
    count = 0
    for message in reversed(messages):
        blocks = message.content if isinstance(message.content, list) else []
        kinds = {b.get("type") for b in blocks if isinstance(b, dict)}
        if message.role == "user" and (not blocks or kinds - {"tool_result"}):
            break
        count += message.role == "assistant" and "tool_use" in kinds
    return count


def messages_call(
    request: MessagesRequest, script: list[ScriptedCall], default_rounds: int, rng: random.Random
) -> PlannedCall | None:
    """The tool_use a Messages request gets now (scripted, planned or forced), or None.

    Custom tools (those with an `input_schema`) are callable; `tool_choice` any or a named
    tool forces a call.
    """
    tools = [t for t in request.tools or [] if isinstance(t.get("input_schema"), dict)]
    choice = (request.model_extra or {}).get("tool_choice")
    choice = choice if isinstance(choice, dict) else {"type": "auto"}
    kind = choice.get("type")
    if not tools or kind == "none":
        return None
    made = _turns_since_user(request.messages)
    if kind == "tool":
        tools = [t for t in tools if t.get("name") == choice.get("name")]
    elif kind != "any" and script:
        call = scripted_call(script, [str(t.get("name")) for t in tools], made, rng)
        return call and PlannedCall("toolu_" + call.call_id[5:], call.name, call.arguments)
    elif kind != "any" and made >= _rounds(request.metadata, default_rounds):
        return None
    if not tools:
        return None
    tool = rng.choice(tools)
    call = plan_call({"name": tool.get("name"), "parameters": tool["input_schema"]}, rng)
    return PlannedCall("toolu_" + call.call_id[5:], call.name, call.arguments)


def _rounds(metadata: Any, default: int) -> int:
    value = metadata.get("sim_tool_rounds") if isinstance(metadata, dict) else None
    try:
        return max(int(value), 0) if value is not None else default
    except (TypeError, ValueError):
        return default
