"""A faithful stand-in for vLLM's OpenAI server and Anthropic's Messages API.

Public entry points:

- ``create_sim_app(config)``: the ASGI app (fresh state per call).
- ``SimConfig``, ``SimModel``, ``default_config()``, ``load_config(path)``.
- ``serve_sim(config, host, port)`` (async), ``run_sim(...)`` (blocking),
  ``SimServer`` (a real port in a background thread, for tests).
- ``gateway.sim.command.sim``: the typer command behind ``farebox sim``.
- ``gateway.tokens``: offline tiktoken helpers, shared with the gateway.
"""

from __future__ import annotations

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig, SimModel, TierTiming, default_config, load_config
from gateway.sim.server import SimServer, run_sim, serve_sim

__all__ = [
    "SimConfig",
    "SimModel",
    "SimServer",
    "TierTiming",
    "create_sim_app",
    "default_config",
    "load_config",
    "run_sim",
    "serve_sim",
]
