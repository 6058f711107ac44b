"""The offline tiktoken helpers."""

from __future__ import annotations

import os

import pytest

from gateway import tokens


def test_count_tokens_offline() -> None:
    assert tokens.count_tokens("hello world") == 2
    assert tokens.encode("hello world") == [15339, 1917]


def test_special_token_text_is_plain_text() -> None:
    assert tokens.count_tokens("<|endoftext|>") > 1


def test_bundled_cache_dir_holds_tiktoken_files() -> None:
    folder = tokens.bundled_cache_dir()
    assert folder is not None
    assert folder.name == "tokenizers"


def test_ensure_offline_keeps_a_chosen_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    tokens.ensure_tiktoken_offline()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"


def test_ensure_offline_sets_the_bundled_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    tokens.ensure_tiktoken_offline()
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tokens.bundled_cache_dir())
