"""litellm's bundled model map, read offline as JSON, and lookups of its raw entries.

The map (`model_prices_and_context_window_backup.json`, ~4,900 models, a few MB) ships
inside the litellm package. It is located with `importlib.util.find_spec`, which does
not import litellm: importing it takes seconds and ~200 MB, and may reach the network.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway.pricing.errors import ModelMapError, UnknownModelError

MAP_FILE = "model_prices_and_context_window_backup.json"
_ALIAS_HOPS = 4  # `alias_of` entries point at one real entry; a few hops is plenty


def bundled_map_path() -> Path:
    """Return the path of the price map inside the installed litellm distribution."""
    spec = importlib.util.find_spec("litellm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ModelMapError("litellm is not installed, so its model price map is missing")
    return Path(locations[0]) / MAP_FILE


def load_model_map(path: Path | None = None) -> Mapping[str, Any]:
    """Return the price map at `path` (litellm's bundled one by default), read once."""
    return _read_map(path or bundled_map_path())


# The map is a read-only file of an installed package: parsing it once per process is safe,
# and saves ~50 ms and a few MB of garbage for every PriceBook built after the first.
@functools.lru_cache(maxsize=4)
def _read_map(path: Path) -> Mapping[str, Any]:
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ModelMapError(f"cannot read the model price map {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelMapError(f"the model price map {path} is not a JSON object")
    # `sample_spec` documents the map's fields; it is not a model.
    models = {k: v for k, v in data.items() if isinstance(v, dict) and k != "sample_spec"}
    return MappingProxyType(models)


class ModelMap(Mapping[str, Any]):
    """litellm's map as a price book reads it: the whole map until `trim()`, then only the
    entries read so far, and every key.

    A serving gateway needs the entries of its configured models (a few of ~4,900, which
    take 5.7 MiB of RSS parsed); `trim()` keeps those and the key set, so whether any name
    is in the map is still answered as before, and reading an entry not kept parses the
    file again for it (correct, at ~50 ms of CPU: `gateway.pricing.serving` reads every
    configured model's entries before trimming, so a request does not).
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._whole: Mapping[str, Any] | None = None
        self._kept: dict[str, Any] = {}
        self._keys: frozenset[str] | None = None  # set by trim()
        digest = _DIGESTS.get(path)
        if digest is not None:  # trimmed already, from another process's reading
            self._kept, self._keys = dict(digest[0]), digest[1]

    def digest(self) -> tuple[dict[str, Any], frozenset[str]]:
        """What a trimmed map holds: the entries read and every key (see `install_digest`)."""
        self.trim()
        assert self._keys is not None
        return dict(self._kept), self._keys

    @property
    def trimmed(self) -> bool:
        """Whether only the entries read before `trim()` are held."""
        return self._keys is not None

    def _map(self) -> Mapping[str, Any]:
        if self._whole is not None:
            return self._whole
        whole = load_model_map(self._path)
        if self._keys is None:
            self._whole = whole
        return whole

    def __getitem__(self, key: str) -> Any:
        entry = self._kept.get(key)
        if entry is None:
            if self._keys is not None and key not in self._keys:
                raise KeyError(key)
            entry = self._kept[key] = self._map()[key]
            if self._keys is not None:  # read again for this entry: let the map go again
                _read_map.cache_clear()
        return entry

    def __contains__(self, key: object) -> bool:
        if key in self._kept:
            return True
        return key in (self._keys if self._keys is not None else self._map())

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys if self._keys is not None else self._map())

    def __len__(self) -> int:
        return len(self._keys if self._keys is not None else self._map())

    def trim(self) -> None:
        """Keep the entries read so far and the keys; let the parsed map go."""
        if self._keys is None:
            self._keys = frozenset(self._map())
            self._whole = None
            _read_map.cache_clear()  # the process's parsed copy, shared by price books


# Digests by map path (None: litellm's bundled map), installed by `farebox serve`.
_DIGESTS: dict[Path | None, tuple[dict[str, Any], frozenset[str]]] = {}


def install_digest(kept: dict[str, Any], keys: frozenset[str], path: Path | None = None) -> None:
    """Start every `ModelMap` of `path` trimmed, from a digest a forked child read
    (`gateway.pricing.serving.serving_digest`): this process then never parses the map,
    and a name outside the digest is still answered as the whole map answers it."""
    _DIGESTS[path] = (dict(kept), frozenset(keys))


def _provider_matches(entry: Mapping[str, Any], provider: str) -> bool:
    """Tell whether `provider` names the entry's provider (`vertex_ai` ~ `vertex_ai-...`)."""
    actual = entry.get("litellm_provider")
    return isinstance(actual, str) and (actual == provider or actual.startswith(f"{provider}-"))


def find_key(model_map: Mapping[str, Any], model: str) -> str | None:
    """Return the map key that describes `model`, following `alias_of`; None if there is none.

    Exact keys win (`zai/glm-5.3`, `claude-opus-5`); `provider/model` also finds an
    unprefixed key whose `litellm_provider` is that provider (`anthropic/claude-opus-5`).
    """
    key: str | None = model if model in model_map else None
    if key is None:
        provider, slash, rest = model.partition("/")
        if slash and rest in model_map and _provider_matches(model_map[rest], provider):
            key = rest
    for _ in range(_ALIAS_HOPS):
        target = model_map[key].get("alias_of") if key is not None else None
        if not isinstance(target, str) or target not in model_map:
            break
        key = target
    return key


def map_entry(model_map: Mapping[str, Any], model: str) -> Mapping[str, Any]:
    """Return the raw map entry of `model`, or raise UnknownModelError."""
    key = find_key(model_map, model)
    if key is None:
        raise UnknownModelError(
            f"model {model!r} is not in litellm's price map: add it under `prices:` "
            "in the configuration (per-token prices, a `base` model, or a `gpu` cost)"
        )
    entry: Mapping[str, Any] = model_map[key]
    return entry


def model_info(model: str, model_map: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return a copy of the model's raw map entry (capabilities, limits, prices as floats)."""
    model_map = model_map if model_map is not None else load_model_map()
    return copy.deepcopy(dict(map_entry(model_map, model)))


def cache_min_tokens(model: str, model_map: Mapping[str, Any] | None = None) -> int | None:
    """Return the fewest prompt tokens the provider will cache for `model`, if published.

    None when the model is unknown or the map has no `prompt_cache_min_tokens` for it.
    """
    model_map = model_map if model_map is not None else load_model_map()
    key = find_key(model_map, model)
    value = model_map[key].get("prompt_cache_min_tokens") if key is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)
