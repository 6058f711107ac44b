"""The real coding-agent CLIs through the gateway: OpenAI's Codex and Anthropic's Claude Code.

Each CLI runs non-interactively (`codex exec`, `claude -p`) against a gateway on a real
port, with the simulator as upstream, once on a route of its own wire (Responses with
`wire: responses`, Messages to an Anthropic route) and once on a chat-completions route
the gateway translates to. The simulator follows a scripted tool plan
(`tool_script`, gateway/sim/tool_calls.py): its first answer calls the CLI's shell tool
with `echo farebox-tool-ran`, the CLI runs it and sends the output back, and the second
answer is text. Each run is one task in the ledger, named by the CLI's own session id
(Codex's `session-id` header, Claude Code's `x-claude-code-session-id`), with two calls
of step kinds user_turn and tool_result and the cost of both.

The CLIs are npm packages installed by `.ci/agent-clis` into `.cache/npm/` at the exact
versions it pins. Without them these tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.servers import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "npm" / "node_modules" / ".bin"
MARKER = "farebox-tool-ran"
CLIENT_KEY = "sk-client-key"
CONFIG = """
models:
  codex: {{model: sim-chat, base_url: "{sim}/v1", family: vllm, wire: responses}}
  codex-chat: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  claude:
    provider: anthropic
    model: claude-sim
    base_url: "{sim}"
    api_key_env: FAREBOX_TEST_ANTHROPIC_KEY
  claude-chat: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
prices:
  codex: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  codex-chat: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  claude: {{base: claude-sonnet-4-5}}
  claude-chat: {{input: 1.00, cached_input: 0.10, output: 4.00}}
"""
# The shell tool of each CLI, called once with a command that prints MARKER.
CODEX_SCRIPT = [{"name": "exec_command", "arguments": {"cmd": f"echo {MARKER}"}}]
CLAUDE_SCRIPT = [
    {"name": "Bash", "arguments": {"command": f"echo {MARKER}", "description": "Print"}}
]


def _cli(name: str) -> Path:
    """The installed CLI, or a failure under CI and a skip elsewhere."""
    path = BIN / name
    if path.exists():
        return path
    reason = f"{path} is not installed: run .ci/agent-clis (npm installs the pinned CLIs)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _gateway(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path, script: list[Any]
) -> Gateway:
    """A gateway on the two routes, and the simulator following `script`."""
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url), encoding="utf-8")
    sim.http.post("/sim/config", json={"tool_script": script}).raise_for_status()
    return make_gateway(config=config)


def _run(
    command: list[str], env: dict[str, str], cwd: Path, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a CLI with only the environment given (no developer keys or settings)."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        command,
        env=base | env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if ok:
        said = f"{command[0]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        assert done.returncode == 0, said
    return done


def _sent(sim: SimControl, path: str) -> list[dict[str, Any]]:
    """What the simulator received on `path`, each with its decoded body."""
    records = [r for r in sim.requests() if r["path"] == path]
    return [r | {"body": json.loads(base64.b64decode(str(r["body_b64"])))} for r in records]


def _task(gateway: Gateway, task: str, requests: int) -> dict[str, Any]:
    """The task once the ledger holds its rows."""
    deadline = time.monotonic() + 20
    while True:
        body = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30).json()
        if body.get("request_count") == requests:
            return dict(body)
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def _rows(task: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(task["requests"], key=lambda r: r["created_at"])


def _codex(
    gateway: Gateway, tmp_path: Path, model: str, *settings: str, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    """`codex exec` on `model`, with a CODEX_HOME whose provider is the gateway."""
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "farebox"\n\n'
        "[model_providers.farebox]\n"
        'name = "Farebox"\n'
        f'base_url = "{gateway.base_url}"\n'
        'env_key = "FAREBOX_API_KEY"\n'
        'wire_api = "responses"\n',
        encoding="utf-8",
    )
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home), "FAREBOX_API_KEY": CLIENT_KEY}
    command = [str(_cli("codex")), "exec", "--json", "--skip-git-repo-check"]
    command += ["--sandbox", "danger-full-access", *settings, "Print the marker with echo."]
    return _run(command, env, tmp_path / "work", ok)


# Translated to chat, Codex's hosted web_search and its multi-agent `namespace` tools have
# no chat form: the tested configuration for a chat route turns them off.
CHAT_ROUTE_SETTINGS = ("-c", 'web_search="disabled"', "-c", "agents.enabled=false")


@pytest.mark.parametrize(
    ("model", "settings", "path"),
    [
        ("codex", (), "/v1/responses"),  # wire: responses: Codex's request as sent
        ("codex-chat", CHAT_ROUTE_SETTINGS, "/v1/chat/completions"),
    ],
)
def test_codex_exec_runs_a_shell_tool_through_the_gateway_as_one_task(
    make_gateway: GatewayFactory,
    sim: SimControl,
    tmp_path: Path,
    model: str,
    settings: tuple[str, ...],
    path: str,
) -> None:
    _cli("codex")  # before the gateway starts: a skip or a failure costs nothing
    gateway = _gateway(make_gateway, sim, tmp_path, CODEX_SCRIPT)
    done = _codex(gateway, tmp_path, model, *settings)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    thread = next(e["thread_id"] for e in events if e["type"] == "thread.started")
    ran = [e["item"] for e in events if e["type"] == "item.completed"]
    assert any(i["type"] == "command_execution" and MARKER in i["aggregated_output"] for i in ran)
    assert any(i["type"] == "agent_message" and i["text"] for i in ran)
    # The simulator got both calls, the second with the command's output.
    sent = _sent(sim, path)
    assert [(r["status"], r["finish_reason"]) for r in sent] == [(200, "tool_calls"), (200, "stop")]
    assert all(r["body"]["model"] == "sim-chat" and r["stream"] for r in sent)
    if path == "/v1/responses":
        results = [i for i in sent[1]["body"]["input"] if i.get("type") == "function_call_output"]
        assert all(r["body"]["store"] is False for r in sent)
    else:
        results = [m for m in sent[1]["body"]["messages"] if m.get("role") == "tool"]
    assert len(results) == 1 and MARKER in json.dumps(results[0])
    # One task, named by Codex's session id, with both calls priced.
    rows = _rows(_task(gateway, thread, 2))
    assert [r["step_kind"] for r in rows] == ["user_turn", "tool_result"]
    assert [r["completion_tokens"] for r in rows] == [r["completion_tokens"] for r in sent]
    assert [r["cached_tokens"] for r in rows] == [r["cached_tokens"] for r in sent]
    assert rows[1]["cached_tokens"] > 0  # the second call extends the first
    for row in rows:
        fresh = row["prompt_tokens"] - row["cached_tokens"]
        expected = (
            fresh * Decimal("1.00") + row["cached_tokens"] * Decimal("0.10")
        ) / 1_000_000 + row["completion_tokens"] * Decimal("4.00") / 1_000_000
        assert Decimal(row["cost_total"]) == expected > 0


def test_codex_on_a_chat_route_with_its_hosted_tools_on_is_told_what_to_change(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    _cli("codex")  # before the gateway starts: a skip or a failure costs nothing
    gateway = _gateway(make_gateway, sim, tmp_path, CODEX_SCRIPT)
    done = _codex(gateway, tmp_path, "codex-chat", ok=False)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "only function tools can be translated to chat completions" in said
    assert "namespace, web_search" in said and "wire: responses" in said
    assert sim.requests() == []  # refused before any upstream call


@pytest.mark.parametrize(
    ("model", "credential", "path"),
    [
        ("claude", "ANTHROPIC_API_KEY", "/v1/messages"),  # forwarded as sent (x-api-key)
        ("claude-chat", "ANTHROPIC_AUTH_TOKEN", "/v1/chat/completions"),  # translated (bearer)
    ],
)
def test_claude_code_runs_bash_through_the_gateway_as_one_task(
    make_gateway: GatewayFactory,
    sim: SimControl,
    tmp_path: Path,
    model: str,
    credential: str,
    path: str,
) -> None:
    claude = _cli("claude")
    gateway = _gateway(make_gateway, sim, tmp_path, CLAUDE_SCRIPT)
    env = {
        "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": gateway.server.url,
        credential: CLIENT_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    command = [str(claude), "-p", "Print the marker with echo.", "--output-format", "json"]
    command += ["--allowedTools", "Bash"]
    done = _run(command, env, tmp_path / "work")
    result = json.loads(done.stdout)
    assert result["subtype"] == "success" and not result["is_error"], result
    assert result["num_turns"] == 2 and result["result"]
    # The simulator got both calls, the second with the tool's output.
    sent = _sent(sim, path)
    native = path == "/v1/messages"
    ends = ("tool_use", "end_turn") if native else ("tool_calls", "stop")
    assert [(r["status"], r["finish_reason"]) for r in sent] == [(200, ends[0]), (200, ends[1])]
    messages = sent[1]["body"]["messages"]
    if native:
        results = [b for m in messages if m["role"] == "user" for b in m["content"]]
        results = [b for b in results if isinstance(b, dict) and b["type"] == "tool_result"]
    else:
        results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 1 and MARKER in json.dumps(results[0]["content"])
    # Claude Code's mid-conversation system turn reached the model as a system message.
    assert any(m["role"] == "system" for m in messages[1:])
    upstream = "claude-sim" if native else "sim-chat"
    assert all(r["body"]["model"] == upstream and r["stream"] for r in sent)
    # One task, named by Claude Code's session id, with both calls priced.
    task = _task(gateway, result["session_id"], 2)
    rows = _rows(task)
    assert [r["step_kind"] for r in rows] == ["user_turn", "tool_result"]
    assert [r["completion_tokens"] for r in rows] == [r["completion_tokens"] for r in sent]
    assert rows[1]["cached_tokens"] > 0  # the second call hits the upstream's cache
    assert Decimal(task["cost"]["total"]) == sum(Decimal(r["cost_total"]) for r in rows) > 0
    # Claude Code's own cost display read the same usage from the stream's events.
    usage = result["modelUsage"][model]
    assert usage["outputTokens"] == task["completion_tokens"]
    assert usage["cacheReadInputTokens"] == task["cached_tokens"]
    assert usage["cacheCreationInputTokens"] == task["cache_write_tokens"]
    fresh = task["prompt_tokens"] - task["cached_tokens"] - task["cache_write_tokens"]
    assert usage["inputTokens"] == fresh


def _readme_block(heading: str, language: str, port: int) -> str:
    """The first `language` code block after `heading` in the README, for this port."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(rf"{re.escape(heading)}.*?```{language}\n(.*?)```", readme, re.S)
    assert block, f"README has no {language} block after {heading!r}"
    return block.group(1).replace("127.0.0.1:4000", f"127.0.0.1:{port}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    """`farebox serve` on its default configuration (what `make run` serves), on a port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env["FAREBOX_DATA_DIR"] = str(tmp_path / "data")
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_ready(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def test_the_readme_settings_work_on_farebox_serve(served: int, tmp_path: Path) -> None:
    """Both CLIs, configured exactly as the README says, on `farebox serve`'s defaults."""
    codex, claude = _cli("codex"), _cli("claude")
    url = f"http://127.0.0.1:{served}/v1"
    home = tmp_path / "codex-home"
    home.mkdir()
    toml = _readme_block("## Use it from Codex", "toml", served)
    (home / "config.toml").write_text(toml, encoding="utf-8")
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home), "FAREBOX_API_KEY": CLIENT_KEY}
    command = [str(codex), "exec", "--json", "--skip-git-repo-check", "Say hello."]
    done = _run(command, env, tmp_path / "work")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    thread = next(e["thread_id"] for e in events if e["type"] == "thread.started")
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert any(i["type"] == "agent_message" and i["text"] for i in items), events
    bash = _readme_block("## Use it from the anthropic SDK or Claude Code", "bash", served)
    exports = [line for line in bash.splitlines() if line.startswith("export ")]
    env = dict(re.findall(r"(\w+)=(\S+)", "\n".join(exports))) | {"HOME": str(tmp_path)}
    command = [str(claude), "-p", "Say hello.", "--output-format", "json"]
    result = json.loads(_run(command, env, tmp_path / "work").stdout)
    assert result["subtype"] == "success" and not result["is_error"], result
    for task_id, alias in ((thread, "sim-chat"), (result["session_id"], "sim-claude")):
        deadline = time.monotonic() + 20
        while (task := httpx.get(f"{url}/tasks/{task_id}", timeout=30).json()).get(
            "request_count"
        ) != 1:
            assert time.monotonic() < deadline, task
            time.sleep(0.05)
        row = task["requests"][0]
        assert (row["model_alias"], row["status_code"], row["step_kind"]) == (
            alias,
            200,
            "user_turn",
        )
        assert Decimal(row["cost_total"]) > 0
    usage = result["modelUsage"]["sim-claude"]
    assert usage["outputTokens"] == task["completion_tokens"]
    assert (
        usage["cacheReadInputTokens"] + usage["inputTokens"] + usage["cacheCreationInputTokens"]
        == task["prompt_tokens"]
    )


def test_codex_session_header_names_the_task_unless_the_client_names_one(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    """The rule the Codex runs rely on, with the `openai` SDK (no CLI needed)."""
    gateway = _gateway(make_gateway, sim, tmp_path, [])
    client = gateway.sdk()
    session = "01a2311c-d8c5-7980-9372-d0bfddd55533"
    for _ in range(2):
        client.responses.create(
            model="codex", input="hi", store=False, extra_headers={"session-id": session}
        )
    named = {"session-id": session, "X-Task-Id": "named-task"}
    client.responses.create(model="codex", input="hi", store=False, extra_headers=named)
    odd = {"session-id": "not a session id"}  # outside [A-Za-z0-9._:-]: not a task name
    client.responses.create(model="codex", input="hi", store=False, extra_headers=odd)
    assert _task(gateway, session, 2)["request_count"] == 2
    assert _task(gateway, "named-task", 1)["request_count"] == 1
    assert len(sim.requests()) == 4
    assert gateway.last(4).task is not None and gateway.last(4).task.implicit
