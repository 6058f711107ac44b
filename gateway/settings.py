"""Process settings from the environment (prefix `FAREBOX_`), read once at start-up."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The embedded default ships inside the package, so any install finds it; policies/ holds a
# byte-identical copy beside the examples (tests/unit/test_default_config_copy.py).
DEFAULT_CONFIG = Path(__file__).resolve().with_name("default.yaml")


def default_data_dir() -> Path:
    """The per-user data folder: $XDG_DATA_HOME/farebox, else ~/.local/share/farebox.

    Never the current directory: `farebox report` run from another folder reads the ledger
    that `farebox serve` wrote, instead of creating an empty one where it stands."""
    base = os.environ.get("XDG_DATA_HOME")
    if base:
        return Path(base) / "farebox"
    try:
        home = Path.home()
    except RuntimeError as exc:  # no HOME and no passwd entry: a container's arbitrary uid
        raise NoDataDirError(
            "farebox: this user has no home directory to keep the ledger in; "
            "set FAREBOX_DATA_DIR (or XDG_DATA_HOME) to a writable folder"
        ) from exc
    return home / ".local" / "share" / "farebox"


class NoDataDirError(RuntimeError):
    """No data folder is configured and the user has no home directory to derive one."""


class Timeouts(BaseSettings):
    """Upstream time limits in seconds; a route may override them later."""

    model_config = SettingsConfigDict(env_prefix="FAREBOX_TIMEOUT_", extra="ignore")

    connect: float = 5.0
    first_token: float = 120.0
    idle_stream: float = 120.0


class RedisLimits(BaseSettings):
    """How long shared state waits on Redis, and when it stops asking (see gateway/state)."""

    model_config = SettingsConfigDict(env_prefix="FAREBOX_REDIS_", extra="ignore")

    timeout_s: float = Field(default=0.25, gt=0, description="Wait for one Redis reply.")
    connect_timeout_s: float = Field(default=0.25, gt=0, description="Wait to connect.")
    failures: int = Field(
        default=3, ge=1, description="Consecutive failed calls that switch to per-process state."
    )
    retry_s: float = Field(default=1.0, gt=0, description="Probe interval while Redis is away.")
    pool_size: int = Field(default=128, ge=1, description="Connections to Redis per process.")
    pool_wait_s: float = Field(
        default=1.0, gt=0, description="Wait for a free pooled connection (a burst queues)."
    )


class Settings(BaseSettings):
    """Everything the gateway reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="FAREBOX_", extra="ignore")

    config: Path | None = Field(
        default=None, description="YAML config with models, prices and policy rules."
    )
    host: str = "127.0.0.1"
    port: int = 4000
    max_body_bytes: int = 32 * 1024 * 1024
    max_api_body_bytes: int = Field(
        default=1024 * 1024, gt=0, description="Body limit of every route but chat and lint."
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="A client must send its request headers in this time."
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="A client must send its whole request body in this time."
    )
    max_connections: int = Field(
        default=1000, gt=0, description="Open client connections; one more is answered 503."
    )
    sim_port: int = Field(
        default=0, description="Port of the bundled simulator when the config uses it; 0 = any."
    )
    database_url: str | None = Field(
        default=None, description="Ledger database; default: a SQLite file in data_dir."
    )
    ledger_flush_interval: float = Field(default=0.2, gt=0)
    reload_poll_s: float = Field(
        default=2.0, gt=0, description="How often the config file is checked for changes."
    )
    redis_url: str | None = None
    redis_limits: RedisLimits = Field(default_factory=RedisLimits)
    ledger_connect_timeout_s: float = Field(
        default=3.0, gt=0, description="PostgreSQL connect timeout of ledger writes and reads."
    )
    ledger_read_timeout_s: float = Field(
        default=10.0, gt=0, description="Statement timeout of a ledger read (/v1/spend, ...)."
    )
    ledger_retention_days: int | None = Field(
        default=None, ge=1, description="Forget ledger days older than this (whole partitions)."
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector (e.g. http://127.0.0.1:4318); unset: no traces.",
    )
    otlp_headers: SecretStr | None = Field(
        default=None, description="Headers of the OTLP export, `k=v,k2=v2` (e.g. an API key)."
    )
    otlp_flush_interval_s: float = Field(
        default=5.0, gt=0, description="How often buffered spans are exported."
    )
    otel_service_name: str = Field(default="farebox", description="service.name of the spans.")
    shutdown_grace_s: float = Field(
        default=30.0, ge=0, description="On SIGTERM, how long in-flight requests may finish."
    )
    prefix_scan_budget: int | None = Field(
        default=None,
        ge=0,
        description="Bytes of new prompt content the prefix check scans per request, each "
        "candidate the pattern tries (matched or rejected) counting 4 KiB; the rest waits "
        "for later requests. Default: 2 MiB with the native locator, 64 KiB without.",
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="The admin key. Unset: open mode (no keys checked, loopback only unless "
        "allow_open); set: every endpoint but /healthz needs a key (docs/security.md).",
    )
    allow_open: bool = Field(
        default=False, description="Serve in open mode on a non-loopback address anyway."
    )

    @field_validator("admin_key")
    @classmethod
    def _usable_admin_key(cls, key: SecretStr | None) -> SecretStr | None:
        """An empty key ran the gateway open while its banner and /readyz said `keys`; a
        padded one can never match (a request's credential is read stripped)."""
        value = key.get_secret_value() if key is not None else None
        if value is not None and not value:
            raise ValueError(
                "FAREBOX_ADMIN_KEY is set but empty: set a key, or unset it for open mode"
            )
        if value is not None and value != value.strip():
            raise ValueError(
                "FAREBOX_ADMIN_KEY starts or ends with whitespace, which no request can "
                "send: remove it"
            )
        return key

    keys_refresh_s: float = Field(
        default=2.0, gt=0, description="How often virtual keys are re-read from the database."
    )
    budget_hold_s: float = Field(
        default=900.0,
        gt=0,
        description="How long a budget hold outlives a process that died holding it; live "
        "requests renew theirs every third of it.",
    )
    responses_ttl_s: float = Field(
        default=3600.0,
        gt=0,
        description="How long a /v1/responses reply is kept for previous_response_id.",
    )
    metrics_port: int | None = Field(
        default=None, description="Serve /metrics (no key) on this port of metrics_host too."
    )
    metrics_host: str = "127.0.0.1"
    workers: int = Field(
        default=1, ge=1, description="Gateway processes on the one port (farebox serve)."
    )
    per_worker_state: bool = Field(
        default=False,
        description="Allow workers > 1 without redis_url: budgets, rate limits and task "
        "totals are then counted in each worker apart.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="The SQLite ledger (farebox.db) and the spool; default: "
        "$XDG_DATA_HOME/farebox, else ~/.local/share/farebox.",
    )
    busy_poll_us: int = Field(
        default=300,
        ge=0,
        le=10_000,
        description="Keep the loop awake until it has been idle this long, while its client "
        "and upstream answer quickly and few requests are in flight (gateway/busy_poll.py); "
        "0: always sleep.",
    )
    log_level: str = "info"
    timeouts: Timeouts = Field(default_factory=Timeouts)

    def ledger_url(self) -> str:
        """The ledger's database URL: the configured one, else SQLite under data_dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir / 'farebox.db'}"

    def uses_default_config(self) -> bool:
        """Whether the embedded default configuration is in force (no FAREBOX_CONFIG)."""
        return self.config is None

    def config_path(self) -> Path:
        """The config file in force: the configured one, else the embedded default."""
        return self.config if self.config is not None else DEFAULT_CONFIG
