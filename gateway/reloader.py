"""Hot reload of the configuration: on file change, on SIGHUP, or through the admin API.

A file that fails validation is refused with its file, line and reason, and the
configuration in force stays in force: a typo never takes the gateway down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from gateway.config import ConfigError, load_config
from gateway.pricing import PricingError
from gateway.services import Services, Snapshot

log = logging.getLogger("farebox.reload")


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    message: str


class ConfigReloader:
    """Swaps the running configuration for the file's, if the file is valid."""

    def __init__(self, services: Services, path: Path | None, poll_s: float = 2.0):
        self.services = services
        self.path = path
        self.poll_s = poll_s
        self._mtime = self._stat()
        self._lock = threading.Lock()  # reloads run in worker threads: one at a time
        self._signalled = asyncio.Event()

    def _stat(self) -> float | None:
        if self.path is None:
            return None
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    async def reload_off_loop(self) -> ReloadResult:
        """`reload` in a worker thread: reading and pricing a file takes milliseconds."""
        result = await asyncio.to_thread(self.reload)
        if result.ok:  # a route that newly needs litellm: load it before a request does
            self.services.upstreams.warm(self.services.config.models.values())
        return result

    def reload(self) -> ReloadResult:
        """Validate the file and put it in force; on error keep the running one."""
        with self._lock:
            return self._reload()

    def _reload(self) -> ReloadResult:
        if self.path is None:
            return ReloadResult(False, "this gateway runs an in-memory configuration: no file")
        try:
            config = load_config(self.path)
            snapshot = Snapshot.build(config)
        except (ConfigError, PricingError) as exc:
            log.error("configuration refused, the previous one stays in force: %s", exc)
            return ReloadResult(False, str(exc))
        missing = set(self.services.config.models) - set(config.models)
        self.services.snapshot = snapshot  # one swap: never half a reload
        log.info("configuration reloaded from %s (%d models)", self.path, len(config.models))
        note = f"; removed: {', '.join(sorted(missing))}" if missing else ""
        return ReloadResult(True, f"reloaded {self.path} ({len(config.models)} models{note})")

    async def watch(self) -> None:
        """Reload whenever the file's modification time changes, or on SIGHUP."""
        while self.path is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signalled.wait(), self.poll_s)
            mtime = self._stat()
            if self._signalled.is_set() or (mtime is not None and mtime != self._mtime):
                self._signalled.clear()
                self._mtime = mtime if mtime is not None else self._mtime
                await self.reload_off_loop()

    def install_sighup(self) -> bool:
        """Reload on SIGHUP when running in the main thread (as `farebox serve` does)."""
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._signalled.set)
            return True
        return False
