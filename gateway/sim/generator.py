"""Deterministic output: words that are each exactly one cl100k_base token.

Every emitted piece is one token, so the completion token count is the number
of pieces, a stream sends one piece per chunk, and re-tokenizing the joined
text gives the same count (the tokenizer splits words at spaces anyway).
"""

from __future__ import annotations

import base64
import hashlib
import random
from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length"]

# Checked by tests/sim/test_sim_generator.py: each entry is a single token.
# fmt: off
STARTERS: tuple[str, ...] = (
    "The", "This", "Here", "Sure", "Yes", "Let", "We", "It", "So", "Okay", "First", "Well",
    "Now", "Next", "Thus", "Also", "Then", "Given", "Note",
)
WORDS: tuple[str, ...] = (
    " the", " model", " answer", " is", " a", " simple", " and", " clear", " result", " of",
    " this", " request", " with", " some", " more", " data", " on", " that", " plan", " to",
    " be", " in", " for", " we", " can", " see", " it", " will", " now", " check", " each",
    " step", " as", " well", " so", " here", " one", " two", " three", " next", " first",
    " value", " token", " list", " cache", " time", " cost", " task", " note", " given",
    " then", " also", " only", " just", " more", " most", " good", " best", " fine", " done",
)
# fmt: on

EFFORT_SCALE: dict[str, float] = {
    "none": 0.0,
    "minimal": 0.25,
    "low": 0.5,
    "medium": 1.0,
    "high": 2.0,
    "xhigh": 3.0,
    "max": 4.0,
}


@dataclass(frozen=True)
class OutputPlan:
    """What the model will emit: reasoning pieces, answer pieces and why it stops."""

    reasoning: tuple[str, ...]
    content: tuple[str, ...]
    finish_reason: FinishReason

    @property
    def reasoning_tokens(self) -> int:
        """Return the number of reasoning tokens."""
        return len(self.reasoning)

    @property
    def completion_tokens(self) -> int:
        """Return all output tokens, reasoning included."""
        return len(self.reasoning) + len(self.content)

    @property
    def reasoning_text(self) -> str:
        """Return the reasoning as one string."""
        return "".join(self.reasoning)

    @property
    def content_text(self) -> str:
        """Return the answer as one string."""
        return "".join(self.content)


def rng_for(seed: int, prompt: str) -> random.Random:
    """Return a generator seeded by the request seed and the exact prompt."""
    digest = hashlib.sha256(f"{seed}\x1f{prompt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def pick_words(rng: random.Random, count: int, *, fresh_start: bool = True) -> tuple[str, ...]:
    """Pick count single-token words; a fresh start begins with a capitalised word."""
    if count <= 0:
        return ()
    first = rng.choice(STARTERS) if fresh_start else rng.choice(WORDS)
    return (first, *(rng.choice(WORDS) for _ in range(count - 1)))


def scaled_length(base: int, effort: str | None) -> int:
    """Scale a default reasoning length by an effort level; unknown or absent means medium."""
    scale = EFFORT_SCALE.get(effort or "medium", 1.0)
    if scale == 0.0:
        return 0
    return max(1, round(base * scale))


def plan_output(
    rng: random.Random,
    reasoning_len: int,
    content_len: int,
    max_tokens: int | None,
    *,
    continuing: bool = False,
) -> OutputPlan:
    """Plan reasoning then answer, truncating both to max_tokens like an engine would."""
    reasoning = pick_words(rng, reasoning_len, fresh_start=not continuing)
    content = pick_words(rng, content_len, fresh_start=not continuing or reasoning_len > 0)
    if max_tokens is None or len(reasoning) + len(content) <= max_tokens:
        return OutputPlan(reasoning, content, "stop")
    kept_reasoning = reasoning[:max_tokens]
    kept_content = content[: max_tokens - len(kept_reasoning)]
    return OutputPlan(kept_reasoning, kept_content, "length")


def signature_for(text: str) -> str:
    """Return a stable, opaque signature for a thinking block (not cryptographic proof)."""
    digest = hashlib.sha256(("farebox-sim-thinking\x1f" + text).encode()).digest()
    return base64.b64encode(b"sim1" + digest * 3).decode("ascii")
