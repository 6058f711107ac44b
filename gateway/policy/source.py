"""Read the policy keys of a configuration file; every error names the file, line and field.

The file may hold the whole gateway configuration (`models:`, `prices:`, `tasks:`...):
only `defaults`, `rules` and `routing` are validated here, the rest is the config's own.
Aliases that routing sends traffic to (tier pools, fallbacks) must be configured models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway import yaml_text
from gateway.policy.schema import POLICY_KEYS, Policy

Location = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the policy: where (dotted path and line) and why."""

    location: str
    message: str
    line: int | None = None

    def render(self, source: str) -> str:
        """Write the problem as `source:line: location: message`."""
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.location}: {self.message}"


class PolicyError(ValueError):
    """The policy is unusable; `problems` lists each error with its line."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__("\n".join(problem.render(source) for problem in self.problems))


def policy_part(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a configuration mapping that belong to the policy."""
    return {key: raw[key] for key in POLICY_KEYS if key in raw}


def format_location(loc: Sequence[str | int]) -> str:
    """Write ("rules", 0, "max_tokens") as `rules[0].max_tokens`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node, int] | None:
    """The child node at `part` and the line that names it (the key's, or the item's)."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return value, key.start_mark.line + 1
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item = node.value[part]
        return item, item.start_mark.line + 1
    return None


def resolve(root: yaml.Node | None, loc: Sequence[str | int]) -> tuple[Location, int | None]:
    """Follow `loc` into the YAML tree: the part found there, and the line it starts on."""
    if root is None:
        return tuple(loc), None
    node, line, found = root, root.start_mark.line + 1, []
    for part in loc:
        step = _child(node, part)
        if step is None:
            break
        node, line = step
        found.append(part)
    return tuple(found), line


def _problems(
    exc: ValidationError, root: yaml.Node | None, with_lines: bool = True
) -> list[Problem]:
    """One problem per location, the location cut where the data ends (union branch names)."""
    merged: dict[tuple[str, int | None], list[str]] = {}
    for error in exc.errors():
        loc = [part for part in error["loc"] if isinstance(part, str | int)]
        found, line = resolve(root, loc)
        line = line if with_lines else None
        message = str(error["msg"]).removeprefix("Value error, ")
        messages = merged.setdefault((format_location(found), line), [])
        if message not in messages:
            messages.append(message)
    return [Problem(where, "; ".join(msgs), line) for (where, line), msgs in merged.items()]


def validate_policy(raw: Mapping[str, Any]) -> Policy:
    """Validate the policy keys of a configuration mapping (others are ignored)."""
    part = policy_part(raw)
    try:
        return Policy.model_validate(part)
    except ValidationError as exc:
        # The data as a YAML tree, only to trim locations: there are no lines to report.
        try:
            root: yaml.Node | None = yaml_text.compose(yaml.safe_dump(part))
        except yaml.YAMLError:
            root = None
        raise PolicyError("<policy>", _problems(exc, root, with_lines=False)) from exc


def reference_problems(policy: Policy, models: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """Routing that points at aliases the configuration does not define."""
    found: list[tuple[Location, str]] = []
    for pattern, route in policy.routing.items():
        if not any(fnmatchcase(alias, pattern) for alias in models):
            found.append((("routing", pattern), f"no model alias matches '{pattern}'"))
        for tier, target in route.tiers.items():
            if target.alias is not None and target.alias not in models:
                loc: Location = ("routing", pattern, "tiers", tier, "alias")
                found.append((loc, f"'{target.alias}' is not a configured model"))
        for index, step in enumerate(route.fallbacks):
            if step.alias is not None and step.alias not in models:
                loc = ("routing", pattern, "fallbacks", index, "alias")
                found.append((loc, f"'{step.alias}' is not a configured model"))
    return found


def _yaml_problem(exc: yaml.YAMLError) -> Problem:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    reason = getattr(exc, "problem", None) or str(exc)
    return Problem("(file)", f"invalid YAML: {reason}", line)


def parse_policy(text: str, source: str = "<policy>") -> tuple[Policy, dict[str, Any]]:
    """Validate the policy keys of configuration text; return the policy and the whole mapping."""
    try:
        root = yaml_text.compose(text)
        raw = yaml_text.load(text) or {}
    except yaml.YAMLError as exc:
        raise PolicyError(source, [_yaml_problem(exc)]) from exc
    if not isinstance(raw, dict):
        raise PolicyError(source, [Problem("(top level)", "the top level must be a mapping", 1)])
    try:
        policy = Policy.model_validate(policy_part(raw))
    except ValidationError as exc:
        raise PolicyError(source, _problems(exc, root)) from exc
    models = raw.get("models")
    if isinstance(models, dict):
        refs = reference_problems(policy, models)
        if refs:
            problems = [
                Problem(format_location(loc), msg, resolve(root, loc)[1]) for loc, msg in refs
            ]
            raise PolicyError(source, problems)
    return policy, raw


def load_policy(path: Path) -> tuple[Policy, dict[str, Any]]:
    """Read and validate a configuration file's policy; errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise PolicyError(
            str(path), [Problem("(file)", f"cannot read the file ({reason})")]
        ) from exc
    return parse_policy(text, source=str(path))
