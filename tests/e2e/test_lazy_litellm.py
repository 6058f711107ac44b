"""Start-up and the OpenAI-compatible path never import litellm (seconds and ~200 MB)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys
    from starlette.testclient import TestClient
    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.settings import Settings
    from gateway.cli import app as cli_app  # the CLI and all its commands, registered

    config = parse_config(
        "models:\\n"
        "  local: {model: sim-chat, base_url: sim}\\n"
        "  claude: {provider: anthropic, model: claude-sim, base_url: sim}\\n"
    )
    with TestClient(create_app(Settings(data_dir=sys.argv[1]), config)) as client:
        body = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert "litellm" not in sys.modules, "the OpenAI-compatible path imported litellm"
        body["model"] = "claude"
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert "litellm" in sys.modules
    print("ok")
    """
)


def test_litellm_is_imported_only_by_a_route_that_needs_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
