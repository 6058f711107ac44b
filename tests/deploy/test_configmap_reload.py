"""The Helm chart's `config.reload: watch`: a ConfigMap update reaches a running gateway.

The kubelet updates a ConfigMap volume by writing the new files into a fresh hidden
directory and swapping the `..data` symlink to it in one rename; `farebox.yaml` is a
symlink through `..data`. The gateway's file watch (FAREBOX_RELOAD_POLL_S) must see that
swap, with no restart. This test lays the files out exactly so and swaps them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from gateway.app import create_app
from gateway.settings import Settings
from tests.servers import ServerThread, running

CONFIG = """\
models:
  {alias}: {{provider: openai, model: sim-chat, base_url: "{sim}/v1"}}
"""


def _publish(volume: Path, version: int, text: str) -> None:
    """Write a ConfigMap version the way the kubelet's atomic writer does."""
    target = volume / f"..2026_12_01_00_00_0{version}.000000001"
    target.mkdir()
    (target / "farebox.yaml").write_text(text)
    (volume / "..data_tmp").symlink_to(target.name)
    os.replace(volume / "..data_tmp", volume / "..data")  # the one atomic step
    if not (volume / "farebox.yaml").is_symlink():
        (volume / "farebox.yaml").symlink_to("..data/farebox.yaml")


def _models(server: ServerThread) -> list[str]:
    return [m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]]


def test_a_configmap_swap_is_reloaded_without_a_restart(
    sim_server: ServerThread, tmp_path: Path
) -> None:
    volume = tmp_path / "etc-farebox"
    volume.mkdir()
    _publish(volume, 1, CONFIG.format(alias="chat", sim=sim_server.url))
    settings = Settings(
        config=volume / "farebox.yaml", reload_poll_s=0.1, data_dir=tmp_path / "data"
    )
    with running(create_app(settings), settings) as server:
        assert _models(server) == ["chat"]
        _publish(volume, 2, CONFIG.format(alias="chat-v2", sim=sim_server.url))
        deadline = time.monotonic() + 15
        while _models(server) != ["chat-v2"]:
            assert time.monotonic() < deadline, "the swapped ConfigMap was never reloaded"
            time.sleep(0.1)
