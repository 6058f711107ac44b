"""litellm (seconds and ~200 MB to import) is loaded only when a route needs it, and then
at start-up or at the reload that adds the route, before `/readyz` says ready: the first
request to that route never pays for the import.

Each case runs in a fresh interpreter, since an import happens once per process. The
import is held at a gate the script opens, so "warming" is seen without a race.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PRELUDE = textwrap.dedent(
    """
    import importlib.abc, importlib.machinery, sys, threading, time
    from starlette.testclient import TestClient
    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.settings import Settings
    from gateway.cli import app as cli_app  # the CLI and all its commands, registered

    GATE = threading.Event()

    class HoldLitellm(importlib.abc.MetaPathFinder):
        # Finds litellm where it is, but runs its import only once GATE opens (locating
        # its price map with find_spec, as start-up does, imports nothing and waits not).
        def find_spec(self, name, path=None, target=None):
            if name != "litellm":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run = spec.loader.exec_module

            def exec_module(module):
                assert GATE.wait(120), "the test never opened the gate"
                run(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, HoldLitellm())
    LOCAL = "  local: {model: sim-chat, base_url: sim}\\n"
    CLAUDE = "  claude: {provider: anthropic, model: claude-sim, base_url: sim}\\n"

    def ask(client, model):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text

    def litellm_loaded():
        # In sys.modules from the moment its import starts: loaded once it has run.
        return hasattr(sys.modules.get("litellm"), "acompletion")

    def ready_after_warming(client):
        try:
            warming = client.get("/readyz")
            assert warming.status_code == 503, warming.text
            assert warming.json()["status"] == "warming", warming.text
            assert client.get("/healthz").status_code == 200  # alive (and listening) meanwhile
            assert not litellm_loaded()
        finally:
            GATE.set()  # also on failure, so the import thread does not hold shutdown
        for _ in range(1200):
            ready = client.get("/readyz")
            if ready.status_code == 200:
                break
            assert ready.json()["status"] == "warming", ready.text
            time.sleep(0.1)
        assert ready.json()["status"] == "ready", ready.text
        # Loaded before any request to the route asked for it.
        assert litellm_loaded()
    """
)

NO_LITELLM_ROUTE = textwrap.dedent(
    """
    GATE.set()
    config = parse_config("models:\\n" + LOCAL)
    with TestClient(create_app(Settings(data_dir=sys.argv[1]), config)) as client:
        assert client.get("/readyz").json()["status"] == "ready"
        ask(client, "local")
        assert "litellm" not in sys.modules, "a configuration without litellm routes loaded it"
    print("ok")
    """
)

AT_START_UP = textwrap.dedent(
    """
    config = parse_config("models:\\n" + LOCAL + CLAUDE)
    with TestClient(create_app(Settings(data_dir=sys.argv[1]), config)) as client:
        ask(client, "local")  # the OpenAI-compatible path serves while litellm loads
        ready_after_warming(client)
        ask(client, "claude")
    print("ok")
    """
)

AT_RELOAD = textwrap.dedent(
    """
    from pathlib import Path
    path = Path(sys.argv[1]) / "farebox.yaml"
    path.write_text("models:\\n" + LOCAL)
    with TestClient(create_app(Settings(data_dir=sys.argv[1], config=path))) as client:
        assert client.get("/readyz").json()["status"] == "ready"
        path.write_text("models:\\n" + LOCAL + CLAUDE)
        assert client.post("/admin/reload").status_code == 200
        ready_after_warming(client)
        ask(client, "claude")
    print("ok")
    """
)


BROKEN_INSTALL = textwrap.dedent(
    """
    class Broken(importlib.abc.MetaPathFinder):
        # litellm as a broken install would leave it: found, but its import fails.
        def find_spec(self, name, path=None, target=None):
            if name != "litellm":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)

            def exec_module(module):
                raise ImportError("litellm is broken in this test")

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Broken())
    GATE.set()
    config = parse_config("models:\\n" + LOCAL + CLAUDE)
    with TestClient(create_app(Settings(data_dir=sys.argv[1]), config)) as client:
        for _ in range(1200):
            ready = client.get("/readyz")
            if ready.json()["status"] != "warming":
                break
            time.sleep(0.1)
        assert ready.status_code == 503 and ready.json()["status"] == "not_ready", ready.text
        (problem,) = ready.json()["problems"]
        assert "litellm failed to load for anthropic/claude-sim" in problem, problem
        ask(client, "local")  # the OpenAI-compatible routes still serve
    print("ok")
    """
)


def _run(script: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def test_litellm_is_never_loaded_without_a_route_that_needs_it(tmp_path: Path) -> None:
    _run(NO_LITELLM_ROUTE, tmp_path)


def test_litellm_is_loaded_at_start_up_before_ready(tmp_path: Path) -> None:
    _run(AT_START_UP, tmp_path)


def test_a_reload_that_adds_a_litellm_route_loads_it_before_ready(tmp_path: Path) -> None:
    _run(AT_RELOAD, tmp_path)


def test_a_litellm_that_fails_to_load_is_reported_not_ready(tmp_path: Path) -> None:
    _run(BROKEN_INSTALL, tmp_path)
