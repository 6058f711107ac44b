"""docs/protocols.md's completions and embeddings example, run as a user runs it:
`farebox serve`, no config (the embedded default's sim-chat and sim-embed)."""

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
