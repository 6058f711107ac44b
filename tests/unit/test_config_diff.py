"""The reload audit's diff summary: names of what changed, nothing else."""

from __future__ import annotations

from gateway.config import parse_config
from gateway.config_diff import config_diff

BASE = """
models:
  chat: {model: m, base_url: "http://10.0.0.1/v1"}
  old: {model: m, base_url: "http://10.0.0.1/v1"}
rules:
  - name: keep
    match: {model: chat}
    strict: true
  - name: gone
    match: {model: old}
    strict: true
"""


def test_models_and_rules_added_removed_changed() -> None:
    new = parse_config(
        BASE.replace("old:", "fresh:")
        .replace(
            'chat: {model: m, base_url: "http://10.0.0.1/v1"}',
            'chat: {model: m2, base_url: "http://10.0.0.1/v1"}',
        )
        .replace("name: gone", "name: added")
    )
    assert config_diff(parse_config(BASE), new) == {
        "models_added": ["fresh"],
        "models_removed": ["old"],
        "models_changed": ["chat"],
        "rules_added": ["added"],
        "rules_removed": ["gone"],
    }


def test_the_same_configuration_has_no_diff_and_moved_rules_are_no_change() -> None:
    assert config_diff(parse_config(BASE), parse_config(BASE)) == {}
    head, keep_and_gone = BASE.split("rules:\n")
    keep, gone = keep_and_gone.split("  - name: gone")
    swapped = f"{head}rules:\n  - name: gone{gone}{keep}"
    assert config_diff(parse_config(BASE), parse_config(swapped)) == {}


def test_other_sections_are_named() -> None:
    new = parse_config(BASE + "tasks: {idle_timeout_s: 5}\n")
    assert config_diff(parse_config(BASE), new) == {"sections_changed": ["tasks"]}
