"""The gateway configuration and the small workload the dashboards are checked against.

Several teams, projects, models and tiers; whole replies and streams (TTFT, thinking then
answer, a thinking cap cut on the stream); a flex call refused with 429 that falls back to
standard; a prompt prefix broken by a timestamp; an upstream 500; an output cap clamped;
tasks finished as success and failed; a budget passing its soft limit.
"""

from __future__ import annotations

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import SimControl

CONFIG = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  thinker: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  capped: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  agent: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: openai}}
  fragile: {{provider: openai, model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang}}
prices:
  chat:
    gpu: {{cost_per_hour: "3.60", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}
  thinker: {{input: 3, output: 15}}
  capped: {{input: 3, output: 15}}
  agent: {{input: 2.5, cached_input: 1.25, output: 10}}
  fragile: {{input: 1, output: 2}}
defaults:
  max_tokens: {{default: 64, ceiling: 128}}
rules:
  - name: think-a-little
    match: {{model: thinker}}
    thinking_budget: 24
  - name: short-thoughts
    match: {{model: capped}}
    thinking_budget: 10
routing:
  thinker:
    capabilities: {{supports_thinking_budget: true}}
  capped:
    capabilities: {{supports_continue_final_message: true}}
  chat:
    tiers:
      flex: {{set: {{service_tier: flex}}}}
    fallbacks:
      - {{from_tier: flex, statuses: [429], tier: standard}}
    retry: {{attempts: 0}}
tenants:
  teams:
    beta: {{budget: {{daily_usd: 100, soft_ratio: 0.000001}}}}
"""
GUIDE = "You are the billing agent. Follow the runbook exactly. " * 120
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Plan the migration."}]


def _who(team: str, project: str, task: str | None = None, done: bool = False) -> dict[str, str]:
    headers = {"X-Farebox-Team": team, "X-Farebox-Project": project}
    if task is not None:
        headers["X-Task-Id"] = task
    if done:
        headers["X-Task-Done"] = "true"
    return headers


def _stream(client: openai.OpenAI, model: str, headers: dict[str, str]) -> None:
    stream = client.chat.completions.create(
        model=model,
        messages=QUESTION,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    assert list(stream)


def _turns(step: int, stamp_on_top: bool, hour: int) -> list[ChatCompletionMessageParam]:
    stamp = f"Current time: 2026-11-30T{hour:02d}:{step:02d}:07Z"  # new each round: a miss
    system = f"{stamp}\n{GUIDE}" if stamp_on_top else GUIDE
    messages: list[ChatCompletionMessageParam] = [{"role": "system", "content": system}]
    for earlier in range(step):
        messages += [
            {"role": "user", "content": f"Check invoice {earlier}."},
            {"role": "assistant", "content": f"Invoice {earlier} is paid."},
        ]
    return [*messages, {"role": "user", "content": f"Check invoice {step}."}]


def run_round(base_url: str, sim: SimControl, round_no: int) -> None:
    """One pass of the workload (run twice: each series must rise between two scrapes)."""
    sim.fault(match={"model": "sim-chat", "service_tier": "flex"}, status=429, count=1)
    sim.fault(match={"model": "sim-sglang-thinker"}, status=500, count=1)
    client = openai.OpenAI(base_url=base_url, api_key="sk-dashboards", max_retries=0)
    with client:
        alpha, beta, gamma = (f"{team}-{round_no}" for team in ("alpha", "beta", "gamma"))
        ask = client.chat.completions.create
        ask(model="chat", messages=QUESTION, extra_headers=_who("alpha", "web", alpha))
        _stream(client, "chat", _who("alpha", "web", alpha, done=True))
        # Above the 128-token ceiling: clamped (untasked).
        ask(model="chat", messages=QUESTION, max_tokens=500, extra_headers=_who("alpha", "web"))
        # flex refused with 429, served on standard.
        ask(
            model="chat",
            messages=QUESTION,
            extra_body={"service_tier": "flex"},
            extra_headers=_who("beta", "batch", beta),
        )
        _stream(client, "thinker", _who("beta", "batch", beta))
        _stream(client, "capped", _who("beta", "batch", beta))  # thinking cut on the stream
        for step, stamped in ((0, False), (1, True), (2, False)):
            ask(
                model="agent",
                messages=_turns(step, stamped, hour=round_no),
                extra_headers=_who("gamma", "agents", gamma, done=step == 2),
            )
        try:
            ask(model="fragile", messages=QUESTION, extra_headers=_who("gamma", "agents"))
        except openai.InternalServerError:
            pass
        else:
            raise AssertionError("the simulator's 500 did not reach the client")
    url = f"{base_url}/tasks/{beta}/finish"
    httpx.post(url, json={"outcome": "failed"}, timeout=10).raise_for_status()
