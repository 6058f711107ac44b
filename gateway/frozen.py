"""Build a frozen slotted dataclass on the hot path without its frozen `__init__`'s cost.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__`
(a global lookup, an attribute lookup and a call per field): ~4 µs for `CostBreakdown`'s
twelve fields on the slow test box, where a plain slotted dataclass stores each field in
one instruction. `mutable_twin(cls)` makes that plain twin: the same fields, slots and
defaults, whose `__post_init__` gives the object `cls`'s class (a documented `__class__`
assignment between classes of the same slots: no copy), so what it returns *is* a `cls`,
equal to and as frozen as one `cls(...)` builds (gateway/ledger/records.py's
`RoundedRecord` does the same for the ledger row).

The twin skips `cls.__post_init__`: so a class that checks or normalises its fields there
is refused, unless the caller says its arguments need none of it (`unchecked=True`, and a
comment at the call saying why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, field, fields, is_dataclass, make_dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def mutable_twin(cls: type[T], *, unchecked: bool = False) -> Callable[..., T]:
    """A constructor taking `cls`'s fields (those with `init=False` too, as arguments) that
    returns a `cls` built with one store per field."""
    if not is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if "__post_init__" in cls.__dict__ and not unchecked:
        raise TypeError(f"{cls.__name__} checks its fields in __post_init__: build it whole")
    specs: list[tuple[str, Any, Any]] = []
    for spec in fields(cls):
        if spec.default_factory is not MISSING:
            specs.append((spec.name, spec.type, field(default_factory=spec.default_factory)))
        elif spec.default is not MISSING:
            specs.append((spec.name, spec.type, field(default=spec.default)))
        else:
            specs.append((spec.name, spec.type, field()))

    def seal(self: Any) -> None:
        self.__class__ = cls  # the same slots: `cls`, frozen from here on

    namespace = {"__post_init__": seal, "__module__": cls.__module__}
    twin: Callable[..., T] = make_dataclass(
        f"_Mutable{cls.__name__}", specs, namespace=namespace, slots=True, eq=False, repr=False
    )
    return twin
