"""The bench scripts name only what the gateway still has.

Most of bench/ is run by hand, and its imports sit inside functions (a script imports the
gateway after pinning its CPU or choosing a checkout), so a renamed function surfaced
only when someone ran it: `pipeline_parts.py --stages` imported a `_headers` that had
become `request_headers`, and `pipeline_ab.py` swapped in a `finish` that the reply paths
no longer called (they bill with `bill`), so it kept nothing and failed. This reads every
script's syntax tree: each `from gateway... import name` must resolve, and each attribute
used or set on a gateway module imported as a name (`import gateway.x as x; x.attr`)
must exist in that module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _has(module_name: str, attr: str) -> bool:
    module = _module(module_name)
    if module is None:
        return False
    return hasattr(module, attr) or _module(f"{module_name}.{attr}") is not None


def _is_gateway(name: str | None) -> bool:
    return name is not None and (name == "gateway" or name.startswith("gateway."))


def missing_names(source: str) -> list[str]:
    """What `source` takes from the gateway that the gateway lacks, as `line: what`."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # `import gateway.x.y as y`: y -> gateway.x.y
    missing: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_gateway(node.module):
            assert node.module is not None
            if _module(node.module) is None:
                missing.append(f"{node.lineno}: module {node.module}")
                continue
            for alias in node.names:
                if not _has(node.module, alias.name):
                    missing.append(f"{node.lineno}: {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_gateway(alias.name):
                    continue
                if _module(alias.name) is None:
                    missing.append(f"{node.lineno}: module {alias.name}")
                elif alias.asname is not None:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and not _has(aliases[node.value.id], node.attr)
        ):
            missing.append(f"{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_gateway_name_a_bench_script_uses_exists(script: Path) -> None:
    assert missing_names(script.read_text()) == []


def test_a_renamed_function_or_a_patched_name_that_is_gone_is_found() -> None:
    source = (
        "def stages():\n"
        "    from gateway.api.chat import _headers, request_headers\n"
        "    import gateway.pipeline.relay as relay\n"
        "    relay.finish = None\n"
        "    relay.bill = None\n"
        "    import gateway.no_such_module\n"
    )
    assert missing_names(source) == [
        "2: gateway.api.chat._headers",
        "6: module gateway.no_such_module",
        "4: gateway.pipeline.relay.finish",
    ]
