"""Block-hash prefix cache, the way vLLM's automatic prefix caching counts hits.

A prompt is cut into fixed-size blocks of token ids. Each full block's key is
the hash of the previous block's key and the block's own ids, so a key names
the whole prefix up to the end of its block: one changed token changes the key
of its block and of every block after it.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

BlockKey = bytes


def root_key(*parts: str) -> BlockKey:
    """Return the key that starts a chain; parts (model, salt) keep unrelated caches apart."""
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=16).digest()


def _hash_tokens(previous: BlockKey, tokens: Sequence[int]) -> BlockKey:
    digest = hashlib.blake2b(previous, digest_size=16)
    digest.update(array("I", tokens).tobytes())
    return digest.digest()


def chain_keys(
    root: BlockKey, tokens: Sequence[int], block_size: int, known: Sequence[BlockKey] = ()
) -> list[BlockKey]:
    """Return one key per full block of tokens, reusing keys already known for a prefix."""
    keys = list(known)
    previous = keys[-1] if keys else root
    for start in range(len(keys) * block_size, len(tokens) - block_size + 1, block_size):
        previous = _hash_tokens(previous, tokens[start : start + block_size])
        keys.append(previous)
    return keys


@dataclass(frozen=True)
class TokenChain:
    """A token sequence with its block keys, hashed once and shared by both caches."""

    root: BlockKey
    tokens: Sequence[int]
    block_size: int
    keys: list[BlockKey]

    @classmethod
    def build(cls, root: BlockKey, tokens: Sequence[int], block_size: int) -> TokenChain:
        """Hash every full block of tokens."""
        return cls(root, tokens, block_size, chain_keys(root, tokens, block_size))

    def extended(self, more: Sequence[int]) -> TokenChain:
        """Return the chain for these tokens followed by more, rehashing only new blocks."""
        tokens = [*self.tokens, *more]
        return TokenChain(
            self.root,
            tokens,
            self.block_size,
            chain_keys(self.root, tokens, self.block_size, self.keys),
        )

    def key_at(self, position: int) -> BlockKey:
        """Return a key for the exact prefix tokens[:position]."""
        full_blocks = position // self.block_size
        previous = self.keys[full_blocks - 1] if full_blocks else self.root
        tail = self.tokens[full_blocks * self.block_size : position]
        # The length is mixed in so a prefix ending on a block edge differs from the block key.
        return _hash_tokens(previous + position.to_bytes(8, "little"), tail)


class PrefixCache:
    """An LRU set of block keys with a capacity counted in blocks."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[BlockKey, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def cached_tokens(self, keys: Sequence[BlockKey], prompt_len: int) -> int:
        """Count leading prompt tokens whose blocks are cached, leaving at least one to compute."""
        # Like vLLM, the last prompt token is always recomputed to produce the
        # first output token, so a fully cached prompt reports one block less.
        limit = max(prompt_len - 1, 0) // self.block_size
        hits = 0
        for key in keys[:limit]:
            if key not in self._blocks:
                break
            hits += 1
        return hits * self.block_size

    def insert(self, keys: Sequence[BlockKey]) -> None:
        """Mark blocks as most recently used, evicting the least recently used past capacity."""
        # Touched in reverse, as vLLM frees a finished request's blocks tail
        # first: eviction then eats the ends of prompts before their shared heads.
        for key in reversed(keys):
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                self._blocks[key] = None
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def lookup_and_insert(self, keys: Sequence[BlockKey], prompt_len: int) -> int:
        """Return the cached token count for a prompt, then cache all of its blocks."""
        cached = self.cached_tokens(keys, prompt_len)
        self.insert(keys)
        return cached

    def clear(self) -> None:
        """Forget every block."""
        self._blocks.clear()
