"""`farebox serve` with no configuration, then the README's SDK example, as a user runs them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import free_port, sim_only_config, wait_ready

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env["FAREBOX_DATA_DIR"] = str(tmp_path / "data")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(port, process)
        yield port, process
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:  # unread when the test failed before the banner
            process.stdout.close()


def _readme_example(port: int) -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Use it from the OpenAI SDK.*?```python\n(.*?)```", readme, re.S)
    assert block, "README has no SDK example"
    code = block.group(1)
    assert len(code.strip().splitlines()) <= 10
    return code.replace("127.0.0.1:4000", f"127.0.0.1:{port}")


def test_serve_starts_the_simulator_and_the_readme_example_works(
    served: tuple[int, subprocess.Popen[str]], tmp_path: Path
) -> None:
    port, process = served
    script = tmp_path / "example.py"
    script.write_text(_readme_example(port))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "CompletionUsage(" in result.stdout  # the whole reply's usage
    assert "prompt_tokens=" in result.stdout
    process.terminate()
    output, _ = process.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/v1" in output
    assert "bundled simulator" in output


def test_sighup_reloads_the_configuration(tmp_path: Path) -> None:
    config = tmp_path / "farebox.yaml"
    sim_only_config(config)  # without litellm: reloading is the subject
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_DATA_DIR=str(tmp_path / "data"),
        FAREBOX_CONFIG=str(config),
        FAREBOX_RELOAD_POLL_S="3600",  # only the signal can reload it in this test
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, process)
        extra = "  sim-extra:\n    provider: openai\n    model: sim-chat\n    base_url: sim\n"
        config.write_text(config.read_text().replace("models:\n", "models:\n" + extra, 1))
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
            if "sim-extra" in [m["id"] for m in models["data"]]:
                return
            time.sleep(0.1)
        raise AssertionError("SIGHUP did not reload the configuration")
    finally:
        process.terminate()
        process.wait(timeout=30)
