"""`farebox serve` as an operator runs it: the banner per auth mode, --allow-open, SIGHUP audited."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.servers import free_port, sim_only_config, wait_ready

ADMIN_KEY = "farebox-admin-serve-test-key-99"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@contextmanager
def serving(
    tmp_path: Path, *args: str, headers: dict[str, str] | None = None, **env: str
) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """`farebox serve` on a free port with `env`; its output is read once it stopped."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    clean.update(FAREBOX_DATA_DIR=str(tmp_path / "data"))
    clean["FAREBOX_CONFIG"] = str(sim_only_config(tmp_path / "sim-only.yaml"))  # no litellm
    clean.update(env)
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port), *args],
        cwd=tmp_path,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(port, process, headers=headers)
        yield port, process
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:  # unread when the test failed before the banner
            process.stdout.close()


def _banner(process: subprocess.Popen[str]) -> str:
    process.terminate()
    output, _ = process.communicate(timeout=30)
    return " ".join(output.split())


def test_allow_open_serves_a_public_address_and_the_banner_says_open_mode(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--host", "0.0.0.0", "--allow-open") as (port, process):
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready["auth"] == "open"
        banner = _banner(process)
    assert "OPEN MODE: no FAREBOX_ADMIN_KEY, so no key is checked" in banner
    assert "reload the policy" in banner


def test_farebox_allow_open_does_the_same(tmp_path: Path) -> None:
    with serving(tmp_path, "--host", "0.0.0.0", FAREBOX_ALLOW_OPEN="true") as (_, process):
        assert "OPEN MODE" in _banner(process)


def test_with_an_admin_key_sighup_reloads_are_audited(tmp_path: Path) -> None:
    config = tmp_path / "farebox.yaml"
    sim_only_config(config)
    env = {
        "FAREBOX_ADMIN_KEY": ADMIN_KEY,
        "FAREBOX_CONFIG": str(config),
        "FAREBOX_RELOAD_POLL_S": "3600",  # only the signal reloads it
    }
    with serving(tmp_path, "--host", "0.0.0.0", headers=ADMIN, **env) as (port, process):
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/readyz", headers=ADMIN).json()["auth"] == "keys"
        assert httpx.get(f"{base}/readyz").status_code == 401
        extra = "  sim-extra:\n    provider: openai\n    model: sim-chat\n    base_url: sim\n"
        config.write_text(config.read_text().replace("models:\n", "models:\n" + extra, 1))
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        params = {"action": "config.reload"}
        while not (entries := httpx.get(f"{base}/admin/audit", headers=ADMIN, params=params)
                   .json()["data"]):  # fmt: skip
            assert time.monotonic() < deadline, "SIGHUP did not reload the configuration"
            time.sleep(0.1)
        banner = _banner(process)
    assert entries[0]["actor"] == "sighup" and entries[0]["outcome"] == "accepted"
    assert entries[0]["detail"]["models_added"] == ["sim-extra"]
    assert "auth: keys" in banner and "OPEN MODE" not in banner
