"""Count tokens with tiktoken's cl100k_base, offline.

tiktoken normally downloads its BPE files on first use. There is no network in
CI or on air-gapped hosts, but the pinned litellm distribution ships the same
cache files, so we point ``TIKTOKEN_CACHE_DIR`` at them before loading.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENCODING_NAME = "cl100k_base"
_CACHE_ENV = "TIKTOKEN_CACHE_DIR"


def bundled_cache_dir() -> Path | None:
    """Return litellm's bundled tiktoken cache folder, found without importing litellm."""
    # Importing litellm costs seconds and pulls in its whole dependency tree;
    # find_spec only locates the package on disk.
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def ensure_tiktoken_offline() -> None:
    """Point tiktoken at the bundled cache files unless the caller already chose a folder."""
    if os.environ.get(_CACHE_ENV):
        return
    folder = bundled_cache_dir()
    if folder is not None:
        os.environ[_CACHE_ENV] = str(folder)


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """Load cl100k_base once (about 0.4 s), offline."""
    # Imported here: a gateway counts tokens only to estimate a usage the upstream did not
    # send, and importing tiktoken (its Rust core, pkgutil, its plugin registry) at start
    # cost every serving process 1.4 MiB it may never use.
    import tiktoken

    ensure_tiktoken_offline()
    loaded = tiktoken.get_encoding(ENCODING_NAME)
    # Loading adds ~45 MiB to the process, 15 of them the Python dict of 100,000 ranks
    # that tiktoken keeps only to pickle the encoding (its Rust core has its own copy).
    # A gateway loads it for the first usage it must estimate (a cancelled request).
    if isinstance(getattr(loaded, "_mergeable_ranks", None), dict):
        loaded._mergeable_ranks = {}
    return loaded


def encode(text: str) -> list[int]:
    """Tokenize text, treating special-token look-alikes such as <|endoftext|> as plain text."""
    return encoding().encode_ordinary(text)


def decode(tokens: Sequence[int]) -> str:
    """Turn token ids back into text."""
    return encoding().decode(list(tokens))


def count_tokens(text: str) -> int:
    """Return the number of cl100k_base tokens in text."""
    return len(encode(text))
