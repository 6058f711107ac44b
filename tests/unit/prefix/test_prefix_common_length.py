"""`compare.common_prefix` of long records by one native pass (`common_length`) is the
binary search's answer, whether the repeated digests are the same objects or equal ones."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import locate
from gateway.prefix.record import PrefixRecord

compare_module = sys.modules["gateway.prefix.compare"]
COMMON = locate.native_step("common_length")
needs_native = pytest.mark.skipif(COMMON is None, reason="_locate not built")


def _record(digests: tuple[Any, ...], model: str = "m") -> PrefixRecord:
    n = len(digests)
    return PrefixRecord("openai", model, ("s",) * n, digests, ("",) * n, tuple(range(n)), n, 0)


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    shared=st.integers(0, 400),
    extra_a=st.integers(0, 50),
    extra_b=st.integers(0, 50),
    same_objects=st.booleans(),
)
def test_the_native_pass_is_the_search(
    shared: int, extra_a: int, extra_b: int, same_objects: bool
) -> None:
    base = [f"{i:032x}" for i in range(shared)]
    # equal strings that are other objects, as digests read back from the store are
    repeated = base if same_objects else ["".join(list(d)) for d in base]
    a = tuple(base + [f"a{i:031x}" for i in range(extra_a)])
    b = tuple(repeated + [f"b{i:031x}" for i in range(extra_b)])
    native = compare_module.common_prefix(_record(a), _record(b))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compare_module, "_COMMON_LENGTH", None)
        searched = compare_module.common_prefix(_record(a), _record(b))
    assert native == searched == shared


@needs_native
def test_common_length_refuses_what_is_not_a_str() -> None:
    assert COMMON is not None
    assert COMMON(("a", "b", "c"), ("a", "b", "x")) == 2
    assert COMMON(("a", "b"), ("a", "b", "c")) == 2
    assert COMMON((), ("a",)) == 0
    assert COMMON(("a", 1), ("a", 1)) is None  # the Python search decides
    with pytest.raises(TypeError):
        COMMON(["a"], ("a",))


def test_records_of_other_models_share_nothing() -> None:
    digests = tuple(f"{i:032x}" for i in range(100))
    assert compare_module.common_prefix(_record(digests), _record(digests, "other")) == 0
    assert compare_module.common_prefix(_record(digests), _record(digests)) == 100
