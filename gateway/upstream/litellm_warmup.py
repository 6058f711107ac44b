"""A rehearsal of litellm's first call, so no request pays for it.

Importing litellm takes seconds, and its first call to a provider imports that
provider's modules (~0.4 s measured for Anthropic). Both are paid at start-up (or at the
reload that adds the route) by walking one whole and one streamed call through litellm
with `mock_response`: litellm answers it itself and nothing is sent anywhere.
"""

from __future__ import annotations

import logging
from types import ModuleType

WARMUP_KEY = "farebox-warmup"
"""A placeholder key: some providers refuse to build a request without one."""

log = logging.getLogger("farebox.upstream")


def rehearse(litellm: ModuleType, provider: str, model: str) -> None:
    """Run one offline whole call and one offline stream for `provider/model` (blocking).

    Only a head start: if litellm refuses the rehearsal, the first request pays the rest.
    """
    try:
        _rehearse(litellm, provider, model)
    except Exception as exc:  # litellm's own error tree; the import itself succeeded
        log.warning("litellm warm-up call for %s/%s failed: %r", provider, model, exc)


def _rehearse(litellm: ModuleType, provider: str, model: str) -> None:
    call = {
        "model": f"{provider}/{model}",
        "messages": [{"role": "user", "content": "warm-up"}],
        "mock_response": "ok",
        "api_key": WARMUP_KEY,
        "num_retries": 0,
    }
    litellm.completion(**call)
    for _ in litellm.completion(**call, stream=True):
        pass
