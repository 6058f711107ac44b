"""The simulator's scripted tool plan (`tool_script`) on all three APIs, through real SDKs.

The plan is what lets a real agent CLI run a tool against the simulator: Codex's
`exec_command` and Claude Code's `Bash` get a command they can run. Also the Responses
tool types Codex offers besides functions (accepted, never called) and the Messages
API's mid-conversation system turns (Claude Code sends them; models without them refuse).
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.sim import SimConfig, SimServer
from gateway.sim.config import ScriptedCall, default_models

SHELL = {
    "type": "object",
    "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
    "required": ["cmd"],
}
SCRIPT = [ScriptedCall(name="shell", arguments={"cmd": "echo one"})]
KEY = "sk-ant-sim"


def _config(**fields: Any) -> SimConfig:
    return SimConfig(tool_script=SCRIPT, **fields)


def test_chat_follows_the_script_then_answers() -> None:
    tools: Any = [{"type": "function", "function": {"name": "shell", "parameters": SHELL}}]
    with SimServer(_config()) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        messages: Any = [{"role": "user", "content": "list files"}]
        first = client.chat.completions.create(model="sim-chat", messages=messages, tools=tools)
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "shell"  # type: ignore[union-attr]
        assert orjson.loads(call.function.arguments) == {"cmd": "echo one"}  # type: ignore[union-attr]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "one"},
        ]
        second = client.chat.completions.create(model="sim-chat", messages=messages, tools=tools)
        assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
        # A script naming a function not offered answers in text.
        other: Any = [{"type": "function", "function": {"name": "other", "parameters": SHELL}}]
        text = client.chat.completions.create(model="sim-chat", messages=messages[:1], tools=other)
        assert text.choices[0].finish_reason == "stop"
        client.close()


def test_responses_accepts_codex_tool_types_and_calls_the_scripted_function() -> None:
    tools: Any = [
        {"type": "function", "name": "shell", "parameters": SHELL, "strict": False},
        {"type": "web_search", "external_web_access": False},
        {"type": "namespace", "name": "agents", "description": "d", "tools": []},
    ]
    with SimServer(_config()) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="x", max_retries=0)
        with client.responses.stream(
            model="sim-chat", input="list files", tools=tools, store=False
        ) as stream:
            reply = stream.get_final_response()
        calls = [item for item in reply.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "shell"
        assert orjson.loads(calls[0].arguments) == {"cmd": "echo one"}
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="sim-chat", input="hi", tools=[{"type": "telepathy"}], store=False
            )
        assert refused.value.body["param"] == "tools[0].type"  # type: ignore[index]
        client.close()


def test_messages_tool_use_whole_and_streamed_then_text_after_the_result() -> None:
    tools: Any = [{"name": "shell", "description": "Run", "input_schema": SHELL}]
    with SimServer(_config()) as sim:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key=KEY, max_retries=0)
        messages: Any = [{"role": "user", "content": "list files"}]
        whole = client.messages.create(
            model="claude-sim", max_tokens=1024, messages=messages, tools=tools
        )
        with client.messages.stream(
            model="claude-sim", max_tokens=1024, messages=messages, tools=tools
        ) as stream:
            streamed = stream.get_final_message()
        for reply in (whole, streamed):
            assert reply.stop_reason == "tool_use"
            use = reply.content[-1]
            assert use.type == "tool_use" and use.name == "shell"
            assert use.input == {"cmd": "echo one"} and use.id.startswith("toolu_")
            assert reply.usage.output_tokens > 0
        assert streamed.usage.output_tokens == whole.usage.output_tokens
        use = whole.content[-1]
        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in whole.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "one"}],
            },  # type: ignore[union-attr]
        ]
        answer = client.messages.create(
            model="claude-sim", max_tokens=1024, messages=messages, tools=tools
        )
        assert answer.stop_reason == "end_turn" and answer.content[-1].type == "text"
        client.close()


def test_mid_conversation_system_turns_only_where_the_model_takes_them() -> None:
    plain = [m.model_copy(update={"mid_conversation_system": False}) for m in default_models()]
    messages: Any = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Answer briefly."},
    ]
    with SimServer(SimConfig()) as sim:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key=KEY, max_retries=0)
        reply = client.messages.create(model="claude-sim", max_tokens=64, messages=messages)
        assert reply.stop_reason in ("end_turn", "max_tokens")
        client.close()
    with SimServer(SimConfig(models=plain)) as sim:
        client = anthropic.Anthropic(base_url=sim.base_url, api_key=KEY, max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.role"):
            client.messages.create(model="claude-sim", max_tokens=64, messages=messages)
        client.close()
