"""A real Prometheus for the dashboard tests: Debian's package, on a free port, in a temp dir.

`require_tools()` installs the package through `.ci/prometheus` when `promtool` is missing;
if it still is, the test fails under CI=true and is skipped on a laptop.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / ".ci" / "prometheus"
Series = list[dict[str, Any]]


def require_tools() -> None:
    """Make sure `prometheus` and `promtool` are on PATH (installing them if need be)."""
    if shutil.which("promtool") and shutil.which("prometheus"):
        return
    result = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=600)
    if shutil.which("promtool") and shutil.which("prometheus"):
        return
    message = f"Prometheus is not installed and {INSTALL} failed: {result.stderr.strip()}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool with `args`, capturing its output."""
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


class Prometheus:
    """Query a running Prometheus over its HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str) -> Series:
        """Evaluate `expr` now (/api/v1/query); raise with Prometheus' error if it fails."""
        response = self.http.get("/api/v1/query", params={"query": expr})
        body = response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{expr!r}: {body.get('errorType')}: {body.get('error')}")
        result = body["data"]["result"]
        return result if isinstance(result, list) else [{"metric": {}, "value": result}]

    def wait_for(self, expr: str, ok: Callable[[Series], bool], timeout: float = 15) -> Series:
        """Query `expr` until `ok` holds for its result, then return that result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if ok(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{expr!r} never satisfied the check; last: {result}")
            time.sleep(0.2)

    def rules(self) -> list[dict[str, Any]]:
        """Every rule Prometheus loaded, with its health and last error."""
        groups = self.http.get("/api/v1/rules").json()["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]


def values(series: Series) -> list[float]:
    """The sample values of an instant query's result."""
    return [float(item["value"][1]) for item in series]


def has_data(series: Series) -> bool:
    """At least one series with a finite value (a quantile of nothing is NaN)."""
    return any(math.isfinite(v) for v in values(series))


@contextmanager
def running_prometheus(
    directory: Path, target: str, rule_files: list[Path]
) -> Iterator[Prometheus]:
    """Start Prometheus scraping `target` (host:port) every second, with `rule_files`."""
    port = free_port()
    config = directory / "prometheus.yml"
    rules = "".join(f"  - {path}\n" for path in rule_files)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n{rules}"
        "scrape_configs:\n  - job_name: farebox\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        _wait_ready(server, process, directory / "prometheus.log")
        yield server
    finally:
        server.http.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_ready(server: Prometheus, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited: {log.read_text()}")
        try:
            if server.http.get("/-/ready").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"prometheus never became ready: {log.read_text()}")
