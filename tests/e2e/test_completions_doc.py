"""docs/protocols.md's completions and embeddings example, run as a user runs it:
`farebox serve` on the embedded default (its sim-chat and sim-embed; without the litellm
route, which the example does not use and which costs seconds of CPU to load)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_serve_readme import ROOT
from tests.servers import free_port, sim_only_config, wait_ready


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env["FAREBOX_DATA_DIR"] = str(tmp_path / "data")
    env["FAREBOX_CONFIG"] = str(sim_only_config(tmp_path / "farebox.yaml"))
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_ready(port, process)
        yield port, process
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _doc_example(port: int) -> str:
    doc = (ROOT / "docs" / "protocols.md").read_text()
    block = re.search(r"## OpenAI completions.*?```python\n(.*?)```", doc, re.S)
    assert block, "docs/protocols.md has no completions example"
    return block.group(1).replace("127.0.0.1:4000", f"127.0.0.1:{port}")


def test_the_completions_example_runs_as_one_billed_task(
    served: tuple[int, subprocess.Popen[str]], tmp_path: Path
) -> None:
    port, process = served
    script = tmp_path / "example.py"
    script.write_text(_doc_example(port))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "2 256 Usage(prompt_tokens=" in result.stdout
    task = httpx.get(f"http://127.0.0.1:{port}/v1/tasks/demo-completions", timeout=30).json()
    assert task["request_count"] == 3 and task["status"] == "success"
    kinds = sorted(r["step_kind"] for r in task["requests"])
    assert kinds == ["completion", "completion", "embedding"]
    assert float(task["cost"]["total"]) > 0
    process.terminate()
    process.communicate(timeout=30)
