"""docs/protocols.md's anthropic SDK example, run as a user runs it: `farebox serve`, no config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.test_serve_readme import ROOT, served

__all__ = ["served"]  # the fixture: `farebox serve` on a free port, the embedded config


def _doc_example(port: int) -> str:
    doc = (ROOT / "docs" / "protocols.md").read_text()
    block = re.search(r"## Anthropic Messages.*?```python\n(.*?)```", doc, re.S)
    assert block, "docs/protocols.md has no anthropic SDK example"
    return block.group(1).replace("127.0.0.1:4000", f"127.0.0.1:{port}")


def test_the_messages_example_runs_and_is_billed_to_its_task(
    served: tuple[int, subprocess.Popen[str]], tmp_path: Path
) -> None:
    port, process = served
    script = tmp_path / "example.py"
    script.write_text(_doc_example(port))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "Usage(" in result.stdout and "input_tokens=" in result.stdout
    assert "MessageTokensCount(input_tokens=" in result.stdout
    task = httpx.get(f"http://127.0.0.1:{port}/v1/tasks/demo-task", timeout=30).json()
    assert task["request_count"] == 1 and task["prompt_tokens"] > 0
    assert float(task["cost"]["total"]) > 0
    process.terminate()
    process.communicate(timeout=30)  # reads and closes the server's output pipe
