"""A model's backend family, from its `family`, provider and upstream: one rule for all.

    family set               -> that family
    provider: anthropic      -> anthropic
    provider: other litellm  -> other (litellm translates; only OpenAI-shaped fields)
    provider: openai (or none)
      no base_url            -> openai (the SDK's default upstream, api.openai.com)
      api.openai.com         -> openai
      base_url: sim          -> vllm (the bundled simulator speaks vLLM's dialect)
      a private host         -> vllm, guessed (self-hosted OpenAI-compatible servers)
      a host named *sglang*  -> sglang, guessed
      any other public host  -> other, guessed (a hosted OpenAI-compatible API)

A guess is never silent: `farebox policy check` reports it as a warning that names the
model and asks for `family:`. The family decides which tier and reasoning fields are sent,
so a wrong one sends a backend what it refuses, or drops what it would honour.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from gateway.policy.schema import FAMILIES, Family

SIM_BASE_URL = "sim"
OPENAI_HOSTS = frozenset({"api.openai.com"})
_PRIVATE_SUFFIXES = (".internal", ".local", ".lan", ".svc", ".cluster.local", ".localdomain")


@dataclass(frozen=True, slots=True)
class FamilyFinding:
    """A route's family and, when it had to be guessed, why."""

    family: Family
    guessed: bool = False
    reason: str = ""

    def warning(self, alias: str) -> str | None:
        """The `policy check` warning for a guessed family, None when it was not guessed."""
        if not self.guessed:
            return None
        return (
            f"family guessed as {self.family} for model {alias} ({self.reason}); "
            f"set `family:` to one of {', '.join(FAMILIES)}"
        )


def _host(base_url: str) -> str:
    return (urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()


def _is_private(host: str) -> bool:
    """Whether `host` names a machine on a private network (self-hosted servers live there)."""
    if host == "localhost" or "." not in host or host.endswith(_PRIVATE_SUFFIXES):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_private or address.is_loopback or address.is_link_local


def _openai_compatible(base_url: str) -> FamilyFinding:
    if base_url.strip() == SIM_BASE_URL:
        return FamilyFinding("vllm")
    host = _host(base_url)
    if host in OPENAI_HOSTS:
        return FamilyFinding("openai")
    if "sglang" in host:
        return FamilyFinding("sglang", True, f"the host {host} names SGLang")
    if _is_private(host):
        return FamilyFinding("vllm", True, f"{host} looks self-hosted")
    return FamilyFinding("other", True, f"{host} is not api.openai.com")


@lru_cache(maxsize=1024)
def derive_family(
    provider: str | None, base_url: str | None, family: str | None = None
) -> FamilyFinding:
    """The backend family of a `models:` entry, with whether it was guessed.

    Kept per arguments (a frozen result of three strings): a route's `wire_family` is read
    several times a request, and guessing it parses the base URL and its host.
    """
    if family in FAMILIES:
        return FamilyFinding(FAMILIES[FAMILIES.index(family)])
    name = (provider or "openai").strip().lower()
    if name == "anthropic":
        return FamilyFinding("anthropic")
    if name != "openai":
        return FamilyFinding("other")
    return FamilyFinding("openai") if base_url is None else _openai_compatible(base_url)
