"""gateway.tokens keeps one copy of cl100k_base's ranks (tiktoken's Rust core), not two."""

from __future__ import annotations

from gateway import tokens


def test_the_encoding_counts_and_round_trips_without_its_python_ranks() -> None:
    loaded = tokens.encoding()
    assert loaded._mergeable_ranks == {}  # 15 MiB of Python dict, used only to pickle
    assert tokens.count_tokens("hello world") == 2
    assert tokens.count_tokens("<|endoftext|>") > 1  # ordinary text, not the special token
    text = "Grüße, 世界! def f(x):\n    return x * 2"
    assert tokens.decode(tokens.encode(text)) == text
    assert loaded.n_vocab == 100277
    assert loaded.decode_single_token_bytes(loaded.encode_ordinary(" world")[0]) == b" world"
