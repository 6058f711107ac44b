"""A small, known workload for the cost explorer, and `make screenshots`.

Two teams with real virtual keys call the simulator through the gateway: alpha's agent
plans on a thinking model (streamed, so with a TTFT), breaks its prompt prefix with a
timestamp (a priced miss) and then reads the stable prefix from the cache again; alpha's
docs task reuses a stable prompt (cache hits); beta's batch task runs on a GPU-priced
route and fails, and beta leaves one task open. Run as a script, it starts
the simulator and a gateway in this process, runs the workload and writes a screenshot of
each view of `/ui` with headless Chromium:

    python -m tests.e2e.explorer_workload --screenshots docs/screenshots
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.explorer_browser import CHROMIUM, Browser

ADMIN_KEY = "farebox-admin-explorer-0123456789"
GUIDE = "You are the release agent. Follow the runbook exactly, step by step. " * 120
CONFIG = """
models:
  gpt:
    provider: openai
    model: sim-chat
    base_url: {sim}/v1
    family: openai
  thinker:
    provider: openai
    model: sim-thinker
    base_url: {sim}/v1
    family: vllm
  chat:
    provider: openai
    model: sim-chat
    base_url: {sim}/v1
    family: vllm
prices:
  gpt: {{base: gpt-4o}}
  thinker: {{base: o4-mini}}
  chat:
    gpu: {{cost_per_hour: "3.60", prefill_tokens_per_second: 10000, decode_tokens_per_second: 1000}}
"""
TASKS = {  # task id: (team key, outcome or None when left open)
    "alpha-release": ("alpha", "success"),
    "alpha-docs": ("alpha", "success"),
    "beta-batch": ("beta", "failed"),
    "beta-draft": ("beta", None),
}


@dataclass
class Workload:
    """The gateway's base URL and the keys the workload made, by name."""

    url: str
    keys: dict[str, str]

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[key]}"}

    def get(self, key: str, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, headers=self.headers(key))
        assert response.status_code == 200, response.text
        return response.json()


def write_config(directory: Path, sim_url: str) -> Path:
    """The workload's gateway configuration, on the simulator at `sim_url`."""
    path = directory / "explorer.yaml"
    path.write_text(CONFIG.format(sim=sim_url))
    return path


def _turns(step: int, stamp_on_top: bool) -> list[dict[str, str]]:
    system = f"Current time: 2026-11-30T10:{step:02d}:07Z\n{GUIDE}" if stamp_on_top else GUIDE
    messages = [{"role": "system", "content": system}]
    for earlier in range(step):
        messages += [
            {"role": "user", "content": f"Check release step {earlier}."},
            {"role": "assistant", "content": f"Step {earlier} is done."},
        ]
    return [*messages, {"role": "user", "content": f"Check release step {step}."}]


def _call(
    work: Workload, key: str, model: str, task: str, step: str, kind: str, messages: Any,
    stream: bool = False,
) -> None:  # fmt: skip
    headers = {**work.headers(key), "X-Task-Id": task, "X-Task-Step": step,
               "X-Task-Step-Kind": kind}  # fmt: skip
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": 64}
    if stream:  # a stream's row has a TTFT
        body.update(stream=True, stream_options={"include_usage": True})
    url = f"{work.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        text = response.read().decode()
    assert response.status_code == 200, text


def _make_key(url: str, **attributes: str) -> str:
    response = httpx.post(
        f"{url}/admin/keys",
        json=attributes,
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def run_workload(url: str) -> Workload:
    """Make the keys and send the calls; every task but beta-draft is finished."""
    keys = {
        "admin": ADMIN_KEY,
        "alpha": _make_key(url, team="alpha", project="web", name="alpha app"),
        "beta": _make_key(url, team="beta", project="api", name="beta app"),
        "finance": _make_key(url, role="finance", name="books"),
    }
    work = Workload(url, keys)
    _call(work, "alpha", "thinker", "alpha-release", "plan", "reasoning", _turns(0, False), True)
    _call(work, "alpha", "gpt", "alpha-release", "read", "tool", _turns(0, False))
    _call(work, "alpha", "gpt", "alpha-release", "edit", "tool", _turns(1, True))  # a break
    _call(work, "alpha", "gpt", "alpha-release", "check", "tool", _turns(2, False))  # cached
    for step in range(3):  # the same prefix each time: cache hits
        _call(work, "alpha", "gpt", "alpha-docs", f"page-{step}", "write", _turns(step, False))
    for step in range(2):
        _call(work, "beta", "chat", "beta-batch", f"item-{step}", "tool", _turns(step, False))
    _call(work, "beta", "thinker", "beta-draft", "draft", "reasoning", _turns(0, False))
    for task, (key, outcome) in TASKS.items():
        if outcome is not None:
            response = httpx.post(
                f"{url}/v1/tasks/{task}/finish",
                json={"outcome": outcome},
                headers=work.headers(key),
                timeout=30,
            )
            assert response.status_code == 200, response.text
    return work


VIEWS = {
    "overview": "?view=overview&range=24h&by=team",
    "tasks": "?view=tasks&range=24h",
    "task": "?view=task&range=24h&task=alpha-release",
}


def screenshots(work: Workload, directory: Path) -> list[Path]:
    """A PNG of each view, seen with the admin key."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    with Browser(timeout=60) as browser:
        for name, query in VIEWS.items():
            path = directory / f"explorer-{name}.png"
            browser.screenshot(f"{work.url}/ui{query}#key={work.keys['admin']}", path)
            written.append(path)
    return written


@contextlib.contextmanager
def world(sim_url: str, directory: Path, database_url: str | None = None) -> Iterator[Workload]:
    """A keyed gateway on the simulator at `sim_url`, after the workload."""
    from gateway.app import create_app
    from gateway.settings import Settings
    from tests.servers import running

    config = write_config(directory, sim_url)
    extra = {"database_url": database_url} if database_url else {}
    settings = Settings(
        data_dir=directory / "data",
        config=config,
        admin_key=ADMIN_KEY,  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )
    with running(create_app(settings), settings) as gateway:
        yield run_workload(gateway.url)


def main(argv: list[str] | None = None) -> int:
    """Start the simulator and a gateway here, run the workload, write the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", type=Path, default=Path("docs/screenshots"))
    args = parser.parse_args(argv)
    if shutil.which(CHROMIUM) is None:
        print(f"{CHROMIUM} is missing: run .ci/chromium (apt-get install chromium)")
        return 2
    for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
        del os.environ[name]
    from gateway.sim.app import create_sim_app
    from gateway.sim.config import default_config
    from tests.servers import running

    with (
        tempfile.TemporaryDirectory(prefix="farebox-shots-") as scratch,
        running(create_sim_app(default_config())) as sim,
        world(sim.url, Path(scratch)) as work,
    ):
        for path in screenshots(work, args.screenshots):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
