"""Headless Chromium driven over the DevTools protocol on a pipe, with no extra packages.

One browser serves every page of a test file (a Chromium start costs seconds on a busy
machine; a page load, a fraction of one). `--remote-debugging-pipe` makes Chromium read
protocol commands on its fd 3 and write replies on fd 4, each a JSON text ending in NUL.
Each page opens in a tab of its own (so its sessionStorage, where the page keeps the key,
starts empty) and is read once `<body data-ready="true">` says every panel has loaded.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
)
READY = "document.body && document.body.dataset.ready"
STARTS_S = (20.0, 60.0)
"""How long each start may take to answer its first command (a second start waits longer)."""


class BrowserError(RuntimeError):
    """Chromium exited, answered an error, or a page never got ready."""


class Browser:
    """A headless Chromium; `with Browser() as browser: browser.dom(url)`."""

    def __init__(self, timeout: float = 30) -> None:
        # A start that does not answer is tried once more: once, in a loaded CI run, the
        # first command after launch got no answer in 30 s (a start takes 0.3-0.9 s here).
        for wait in STARTS_S:
            self._launch()
            self.timeout = wait
            try:
                self.call("Browser.getVersion")
                break
            except BrowserError:
                self.close()
                if wait == STARTS_S[-1]:
                    raise
        self.timeout = timeout

    def _launch(self) -> None:
        self._ids = itertools.count(1)
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="farebox-chromium-")
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # bash puts our pipe ends on fds 3 and 4, where Chromium looks for them (dash
        # takes one-digit fds only).
        script = f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}'
        self._process = subprocess.Popen(
            ["/bin/bash", "-c", script, CHROMIUM, *FLAGS, "--remote-debugging-pipe",
             f"--user-data-dir={self._profile}", "about:blank"],
            pass_fds=(to_browser, from_browser),
            # Its own process group, so close() can stop the helpers (crashpad, zygote)
            # that go on writing to the profile after the main process has gone.
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self.timeout = min(self.timeout, 5)
        # It may have gone already; the group kill below stops what is left.
        with contextlib.suppress(BrowserError, OSError):
            self.call("Browser.close")
        for fd in (self._commands, self._replies):
            os.close(fd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        _remove_profile(self._profile)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are dropped)."""
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == number:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited (status {self._process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        found: dict[str, Any] = json.loads(message)
        return found

    def open(self, url: str, width: int = 1280, height: int = 1000) -> str:
        """A new tab showing `url`, once the page says it is ready; returns its session."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip
        self.call("Page.navigate", session, url=url)
        deadline = time.monotonic() + self.timeout
        while self.evaluate(session, READY) != "true":
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} never set data-ready")
            time.sleep(0.05)
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        return result["result"].get("value")

    def dom(self, url: str) -> str:
        """The page's DOM, serialised, once it is ready."""
        session = self.open(url)
        html = self.evaluate(session, "document.documentElement.outerHTML")
        self.call("Target.detachFromTarget", sessionId=session)
        return str(html)

    def screenshot(self, url: str, path: Path, width: int = 1280) -> None:
        """A PNG of the whole page, once it is ready."""
        session = self.open(url, width=width)
        height = int(self.evaluate(session, "document.documentElement.scrollHeight"))
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip
        shot = self.call("Page.captureScreenshot", session, format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


def _remove_profile(path: str) -> None:
    """Remove Chromium's profile; a helper still exiting may add a file in between."""
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.1)
