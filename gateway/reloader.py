"""Hot reload of the configuration: on file change, on SIGHUP, or through the admin API.

A file that fails validation is refused with its file, line and reason, and the
configuration in force stays in force: a typo never takes the gateway down.

A reload flood costs little: callers that arrive while a reload runs share the next one
(which starts after theirs arrived, so none is answered with an older file), and a file
whose SHA-256 equals the one in force answers `unchanged` without being parsed. Every
reload that runs is written to the audit log (who, the file's hash, a diff summary,
accepted or refused and why).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gateway.config import ConfigError, parse_config
from gateway.config_diff import config_diff
from gateway.pricing import PricingError
from gateway.services import Services, Snapshot

log = logging.getLogger("farebox.reload")

Result = Literal["reloaded", "unchanged", "refused"]


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    message: str
    result: Result = "reloaded"
    content_hash: str | None = None
    diff: dict[str, Any] = field(default_factory=dict)


class ConfigReloader:
    """Swaps the running configuration for the file's, if the file is valid."""

    def __init__(self, services: Services, path: Path | None, poll_s: float = 2.0):
        self.services = services
        self.path = path
        self.poll_s = poll_s
        self._mtime = self._stat()
        self._hash = _hash_in_force(path)
        self._lock = threading.Lock()  # reloads run in worker threads: one at a time
        self._running = asyncio.Lock()
        self._queued: asyncio.Task[ReloadResult] | None = None
        self._signalled = asyncio.Event()

    def _stat(self) -> float | None:
        if self.path is None:
            return None
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    async def reload_off_loop(self, actor: str = "admin") -> ReloadResult:
        """Reload (in a worker thread), sharing the one queued behind a running reload."""
        if self._queued is None:
            self._queued = asyncio.create_task(self._queued_reload(actor))
        return await asyncio.shield(self._queued)

    async def _queued_reload(self, actor: str) -> ReloadResult:
        async with self._running:
            self._queued = None  # from here on, a new caller queues the next reload
            result = await asyncio.to_thread(self.reload)
            self.services.metrics.config_reloads.labels(result=result.result).inc()
            if result.result == "reloaded":  # a route newly needing litellm: load it now
                self.services.upstreams.warm(self.services.config.models.values())
            await self._audit(actor, result)
            return result

    async def _audit(self, actor: str, result: ReloadResult) -> None:
        audit = getattr(self.services, "audit", None)
        if audit is None:
            return
        detail: dict[str, Any] = {"result": result.result, **result.diff}
        if not result.ok:
            detail["reason"] = result.message
        await audit.record(
            actor=actor,
            action="config.reload",
            target=str(self.path) if self.path is not None else None,
            outcome="accepted" if result.ok else "refused",
            detail=detail,
            content_hash=result.content_hash,
        )

    def reload(self) -> ReloadResult:
        """Validate the file and put it in force; on error keep the running one."""
        with self._lock:
            return self._reload()

    def _reload(self) -> ReloadResult:
        if self.path is None:
            reason = (  # `farebox serve` without FAREBOX_CONFIG runs the embedded default
                "this gateway runs an in-memory configuration (the embedded default or one "
                "given in code), not a file: to reload, serve a file with FAREBOX_CONFIG"
            )
            return ReloadResult(False, reason, "refused")
        try:
            text = _read(self.path)
        except OSError as exc:
            reason = f"{self.path}: cannot read the file ({exc.strerror})"
            return ReloadResult(False, reason, "refused")
        content_hash = _hash_of(text)
        if content_hash == self._hash:
            return ReloadResult(True, f"unchanged: {self.path}", "unchanged", content_hash)
        try:
            config = parse_config(text.decode("utf-8", "replace"), source=str(self.path))
            snapshot = Snapshot.build(config)
        except (ConfigError, PricingError) as exc:
            log.error("configuration refused, the previous one stays in force: %s", exc)
            return ReloadResult(False, str(exc), "refused", content_hash)
        diff = config_diff(self.services.config, config)
        self.services.snapshot = snapshot  # one swap: never half a reload
        self._hash = content_hash
        log.info("configuration reloaded from %s (%d models)", self.path, len(config.models))
        missing = diff.get("models_removed", [])
        note = f"; removed: {', '.join(missing)}" if missing else ""
        message = f"reloaded {self.path} ({len(config.models)} models{note})"
        return ReloadResult(True, message, "reloaded", content_hash, diff)

    async def watch(self) -> None:
        """Reload whenever the file's modification time changes, or on SIGHUP."""
        while self.path is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signalled.wait(), self.poll_s)
            mtime = self._stat()
            signalled = self._signalled.is_set()
            if signalled or (mtime is not None and mtime != self._mtime):
                self._signalled.clear()
                self._mtime = mtime if mtime is not None else self._mtime
                await self.reload_off_loop("sighup" if signalled else "file-watch")

    def install_sighup(self) -> bool:
        """Reload on SIGHUP when running in the main thread (as `farebox serve` does)."""
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._signalled.set)
            return True
        return False


def _hash_in_force(path: Path | None) -> str | None:
    """The hash of the file the configuration in force was read from (at start-up)."""
    if path is None:
        return None
    try:
        return _hash_of(_read(path))
    except OSError:
        return None


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _hash_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()
