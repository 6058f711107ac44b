"""OpenAI's Responses API in chat-completions terms, both ways (pure: no I/O).

Used where a Responses request meets a server that speaks chat completions only (vLLM or
SGLang without `/v1/responses`, the simulator's chat): the request becomes a chat body
(`chat_body`), the chat reply a Response object (`response_from_chat`), the chat stream
the Responses event stream (`responses_stream.ChatToResponses`).

    instructions                  -> a leading system message
    input: "text"                 -> one user message
    message items                 -> messages (input_text / output_text -> text parts,
                                     input_image -> image_url)
    function_call items           -> an assistant message's tool_calls (consecutive ones merged)
    function_call_output items    -> tool messages
    reasoning items               -> not sent (chat has no place for earlier thinking)
    tools (type function)         -> chat's {type: function, function: {...}}
    max_output_tokens             -> max_completion_tokens
    reasoning.effort              -> reasoning_effort
    text.format (json_schema)     -> response_format

Usage is rendered as Responses usage: input_tokens (cached_tokens a subset),
output_tokens (reasoning_tokens a subset).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.request_id import random_hex
from gateway.usage import Usage

PASSED = (
    "model",
    "temperature",
    "top_p",
    "user",
    "service_tier",
    "parallel_tool_calls",
    "top_logprobs",
    "seed",
    "stream",
    "metadata",
)
UNTRANSLATED_TOOLS = "only function tools can be translated to chat completions"


def new_id(prefix: str) -> str:
    """An id in OpenAI's style (`resp_...`, `msg_...`, `fc_...`, `rs_...`): 128 random bits
    from the OS's source, as 32 hex digits, drawn from the request ids' pool (`uuid4` made
    a `getrandom` system call and a UUID object per id, two a translated reply)."""
    return f"{prefix}_{random_hex()}"


def input_items(value: Any) -> list[dict[str, Any]]:
    """The request's `input` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return []


def _part(part: Any) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
        return {"type": "text", "text": str(part.get("text") or "")}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        image: dict[str, Any] = {"url": url}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "refusal":
        return {"type": "text", "text": str(part.get("refusal") or "")}
    return {"type": "text", "text": f"<{kind}>"}


def _content(content: Any) -> Any:
    if isinstance(content, str) or content is None:
        return content or ""
    parts = (
        [p for p in (_part(part) for part in content) if p is not None]
        if isinstance(content, list)
        else []
    )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _role(item: dict[str, Any]) -> str:
    role = item.get("role") or "user"
    return "system" if role == "developer" else str(role)


def chat_messages(instructions: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages for `instructions` and the input items, in order."""
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": _role(item), "content": _content(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id") or new_id("call"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
    return messages


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Function tools in chat's shape; any other tool type cannot be translated (None)."""
    if not isinstance(tools, list):
        return []
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            return None
        function = {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
        }
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """`{type: function, name}` becomes chat's `{type: function, function: {name}}`."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def chat_body(native: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat-completions request for a Responses request whose input is `items`.

    Raises ValueError naming what cannot be translated.
    """
    body: dict[str, Any] = {k: native[k] for k in PASSED if native.get(k) is not None}
    body["messages"] = chat_messages(native.get("instructions"), items)
    tools = chat_tools(native.get("tools"))
    if tools is None:
        kinds = {t.get("type") for t in native["tools"] if isinstance(t, dict)} - {"function"}
        raise ValueError(
            f"{UNTRANSLATED_TOOLS} (got {', '.join(sorted(map(str, kinds)))}); "
            "a route with `wire: responses` takes every tool type natively"
        )
    if tools:
        body["tools"] = tools
        if native.get("tool_choice") is not None:
            body["tool_choice"] = chat_tool_choice(native["tool_choice"])
    if isinstance(native.get("max_output_tokens"), int):
        body["max_completion_tokens"] = native["max_output_tokens"]
    reasoning = native.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort"):
        body["reasoning_effort"] = reasoning["effort"]
    text_format = (
        (native.get("text") or {}).get("format") if isinstance(native.get("text"), dict) else None
    )
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        schema = {k: v for k, v in text_format.items() if k != "type"}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(text_format, dict) and text_format.get("type") == "json_object":
        body["response_format"] = {"type": "json_object"}
    if body.get("stream"):
        body["stream_options"] = {"include_usage": True}
    return body


def responses_usage(usage: Usage) -> dict[str, Any]:
    """A usage in the Responses API's shape."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens + usage.cache_write_1h_tokens,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def message_item(
    text: str, item_id: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    """An assistant message output item holding `text`."""
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def reasoning_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    """A reasoning output item with its text (as vLLM's Responses server reports it)."""
    return {
        "id": item_id or new_id("rs"),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "encrypted_content": None,
        "status": None,
    }


def function_call_item(
    call_id: str, name: str, arguments: str, item_id: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    """A function_call output item."""
    return {
        "id": item_id or new_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning a chat message or delta carries (vLLM's or SGLang's field)."""
    for name in ("reasoning", "reasoning_content"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def output_from_chat(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of one chat reply message: reasoning, text, then tool calls."""
    items: list[dict[str, Any]] = []
    thought = reasoning_of(message)
    if thought:
        items.append(reasoning_item(thought))
    content = message.get("content")
    if isinstance(content, str) and content:
        items.append(message_item(content))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        raw = call.get("function")
        function: dict[str, Any] = raw if isinstance(raw, dict) else {}
        items.append(
            function_call_item(
                str(call.get("id") or new_id("call")),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    return items


def response_object(
    native: dict[str, Any],
    *,
    response_id: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    status: str = "completed",
    incomplete: str | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    """A Response object echoing the request's settings, as OpenAI returns one."""
    asked = native.get("reasoning")
    reasoning: dict[str, Any] = asked if isinstance(asked, dict) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at if created_at is not None else int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": native.get("instructions"),
        "max_output_tokens": native.get("max_output_tokens"),
        "model": native.get("model"),
        "output": output,
        "parallel_tool_calls": native.get("parallel_tool_calls", True),
        "previous_response_id": native.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": native.get("store", True),
        "temperature": native.get("temperature", 1.0),
        "text": native.get("text") or {"format": {"type": "text"}},
        "tool_choice": native.get("tool_choice", "auto"),
        "tools": native.get("tools") or [],
        "top_p": native.get("top_p", 1.0),
        "truncation": native.get("truncation", "disabled"),
        "usage": usage,
        "user": native.get("user"),
        "metadata": native.get("metadata") or {},
    }


def status_of(finish_reason: Any) -> tuple[str, str | None]:
    """A chat finish_reason as the Response's status and incomplete reason."""
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def response_from_chat(
    native: dict[str, Any], reply: dict[str, Any], usage: Usage, response_id: str
) -> dict[str, Any]:
    """A whole chat.completion as a Response object."""
    choices = reply.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    output = output_from_chat(message if isinstance(message, dict) else {})
    status, incomplete = status_of(
        choice.get("finish_reason") if isinstance(choice, dict) else None
    )
    return response_object(
        native,
        response_id=response_id,
        output=output,
        usage=responses_usage(usage),
        status=status,
        incomplete=incomplete,
    )
