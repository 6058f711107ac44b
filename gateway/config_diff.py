"""What a reload changes, for the audit log: models added, removed or changed, rules too.

Pure: two validated configurations in, a small JSON-able summary out (names only, never
a key or a URL's credentials).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.config import GatewayConfig

_SECTIONS = ("prices", "tasks", "defaults", "routing", "tenants")


def config_diff(old: GatewayConfig, new: GatewayConfig) -> dict[str, Any]:
    """The names that differ between `old` and `new`; empty lists are left out."""
    old_rules, new_rules = _rules(old), _rules(new)
    summary: dict[str, Any] = {
        "models_added": sorted(set(new.models) - set(old.models)),
        "models_removed": sorted(set(old.models) - set(new.models)),
        "models_changed": sorted(
            alias
            for alias in set(old.models) & set(new.models)
            if old.models[alias] != new.models[alias]
        ),
        "rules_added": [label for key, label in new_rules.items() if key not in old_rules],
        "rules_removed": [label for key, label in old_rules.items() if key not in new_rules],
        "sections_changed": [
            name for name in _SECTIONS if getattr(old, name, None) != getattr(new, name, None)
        ],
    }
    return {name: names for name, names in summary.items() if names}


def _rules(config: GatewayConfig) -> dict[str, str]:
    """Each rule's canonical JSON -> its label: a changed rule is one removed and one added,
    a rule that only moved is neither."""
    return {
        json.dumps(rule.model_dump(mode="json"), sort_keys=True): rule.label(index)
        for index, rule in enumerate(config.rules)
    }
