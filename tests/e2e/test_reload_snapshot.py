"""A reload mid-request: the request finishes on the configuration it started with."""

from __future__ import annotations

import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import httpx
import openai

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

CONFIG = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  other: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
prices:
  chat: {{gpu: {{cost_per_hour: "3.60", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}}}
  other: {{gpu: {{cost_per_hour: "36.00", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}}}
"""
WITHOUT_CHAT = """
models:
  other: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
prices:
  other: {{gpu: {{cost_per_hour: "36.00", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}}}
"""
# $3.60/h at 10,000 prefill and 1,000 decode tokens/s, per token.
INPUT, OUTPUT = Decimal("1e-7"), Decimal("1e-6")
MESSAGES = [{"role": "user", "content": "Summarise the incident report."}]


def _booked(gateway: Gateway, request_id: str) -> tuple[str, int, int, int, int]:
    """The ledger row of `request_id`, once the writer has committed it."""
    path = gateway.settings.data_dir / "farebox.db"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with sqlite3.connect(path) as db:
            row = db.execute(
                "SELECT model_alias, status_code, prompt_tokens, completion_tokens, cost_total"
                " FROM requests WHERE request_id = ?",
                (request_id,),
            ).fetchone()
        if row is not None:
            return row  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"request {request_id} was never booked")


def test_a_reload_that_removes_the_alias_mid_stream(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    gateway = make_gateway(config=config, reload_poll_s=3600)
    # ~1 s of decoding: the reload lands while the answer is still streaming.
    slow = {"name": "sim-chat", "output_tokens": 20, "decode_ms_per_token": 50}
    sim.http.post("/sim/config", json={"models": [slow]}).raise_for_status()
    client = gateway.sdk()
    stream = client.chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )  # type: ignore[call-overload]
    request_id = stream.headers["x-request-id"]
    chunks = iter(stream.parse())
    text = [next(chunks).choices[0].delta.content or ""]

    config.write_text(WITHOUT_CHAT.format(sim=sim.url))
    reloaded = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert reloaded.status_code == 200 and "removed: chat" in reloaded.json()["message"]

    rest = list(chunks)
    text += [c.choices[0].delta.content or "" for c in rest if c.choices]
    usage = rest[-1].usage
    assert usage is not None and usage.completion_tokens == 20 and "".join(text)
    alias, status, prompt, completion, cost = _booked(gateway, request_id)
    assert (alias, status, prompt, completion) == ("chat", 200, usage.prompt_tokens, 20)
    # Booked at the removed alias's own price, not the price of anything in the new file
    # (SQLite keeps money as integer units of 1e-10).
    assert Decimal(cost).scaleb(-10) == prompt * INPUT + completion * OUTPUT

    with_new = gateway.sdk()
    try:
        with_new.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    except openai.NotFoundError as exc:
        assert exc.code == "model_not_found"
    else:
        raise AssertionError("the removed alias still answered after the reload")
