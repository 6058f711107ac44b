"""Farebox: an OpenAI-compatible, cost-aware LLM gateway."""

__version__ = "0.1.0"
