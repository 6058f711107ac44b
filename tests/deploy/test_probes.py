"""The probes deploy/ ships, run for real against a gateway with an admin key.

The image's HEALTHCHECK probes /healthz (no key); the Helm chart's readiness probe sends
the container's own FAREBOX_ADMIN_KEY to /readyz, which answers 401 without it. Both
commands are read from the files that ship them and run as the container would run them
(`python` is this interpreter).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig, ModelRoute
from gateway.settings import Settings
from tests.deploy.healthcheck_commands import chart_readiness_probe, docker_healthcheck
from tests.deploy.tools import CHART, tool
from tests.servers import ServerThread, free_port, running

ADMIN_KEY = "probe-admin-key-0123456789"


@pytest.fixture(scope="module")
def gateway(
    sim_server: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    route = ModelRoute(provider="openai", model="sim-chat", base_url=f"{sim_server.url}/v1")
    settings = Settings(admin_key=ADMIN_KEY, data_dir=tmp_path_factory.mktemp("probes"))  # type: ignore[arg-type]
    app = create_app(settings, GatewayConfig(models={"chat": route}))
    with running(app, settings) as server:
        yield server


def _run(command: list[str], port: int, key: str | None = None) -> int:
    assert command[0] == "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env["FAREBOX_PORT"] = str(port)
    if key is not None:
        env["FAREBOX_ADMIN_KEY"] = key
    done = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, timeout=30)
    return done.returncode


def _rendered_deployment() -> str:
    helm = tool("helm_python")
    with helm.Chart.load(CHART) as chart:
        return str(chart.render(name="probe")["farebox/templates/deployment.yaml"])


def test_the_image_health_check_passes_on_a_live_gateway_and_fails_on_none(
    gateway: ServerThread,
) -> None:
    command = docker_healthcheck()
    assert _run(command, gateway.port) == 0  # /healthz needs no key
    assert _run(command, free_port()) != 0


def test_the_chart_readiness_probe_sends_the_admin_key(
    gateway: ServerThread, tmp_path: Path
) -> None:
    command = chart_readiness_probe(_rendered_deployment())
    assert _run(command, gateway.port, key=ADMIN_KEY) == 0
    # Without the key /readyz is a 401, with a wrong one too: the probe would fail.
    assert _run(command, gateway.port) != 0
    assert _run(command, gateway.port, key="wrong-key-0123456789") != 0
