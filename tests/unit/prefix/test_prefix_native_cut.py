"""The native steps of the cut and the chain, and the small-request shortcuts, give exactly
what the Python loops they replace give: segments, records, chains, scans."""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import rawjson
from gateway.prefix import PrefixChecker, locate, record, rule_for, segments
from gateway.prefix.checker import repaired_match
from gateway.prefix.detectors import ScanBudget, ScanCache, scan_request
from gateway.prefix.record import build_record, chain_fingerprints, chain_seed
from gateway.prefix.segments import _header, split_request

pytestmark = pytest.mark.skipif(not locate.NATIVE, reason="needs the native _locate module")

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab"\\,[]{}: \n\té€'), max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"])},
    optional={
        "content": st.none()
        | st.text(max_size=20)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)})),
        "name": st.text(max_size=5),
        "cache_control": st.just({"type": "ephemeral"}),
        "extra": JSON,
    },
)
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.lists(st.fixed_dictionaries({"type": st.just("function")}), max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", None]),
        "reasoning_effort": st.sampled_from(["low", "high"]),
        "response_format": st.just({"type": "json_object"}),
        "service_tier": st.just("flex"),
        "max_tokens": st.integers(1, 100),
        "system": st.text(max_size=4),
    },
)


def _python_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the native steps and the shortcuts off: the loops as they were."""
    for name in ("_ARRAY_ITEMS", "_FIRST_LONG", "_ROLES", "_PLAIN_SEGMENTS"):
        monkeypatch.setattr(segments, name, None)
    monkeypatch.setattr(record, "_CHAIN_HEX", None)
    monkeypatch.setattr(record, "_RECORD_COLUMNS", None)
    monkeypatch.setattr(segments, "FEW_MESSAGES", -1)
    monkeypatch.setattr(segments, "_absent_headers", lambda order: None)


def _both(body: dict[str, Any], family: str) -> tuple[Any, Any]:
    rule = rule_for(family)
    fast = split_request(body, rule)
    with pytest.MonkeyPatch.context() as patch:
        _python_steps(patch)
        slow = split_request(body, rule)
        slow_record = build_record(slow, rule)
        slow_chain = slow_record.fingerprints
    fast_record = build_record(fast, rule)
    assert fast_record == slow_record
    assert fast_record.fingerprints == slow_chain
    return fast, slow


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(MESSAGE, max_size=12),
    headers=HEADERS,
    family=st.sampled_from(["openai", "anthropic", "vllm"]),
)
def test_the_cut_is_the_python_loops_cut(
    messages: list[dict[str, Any]], headers: dict[str, Any], family: str
) -> None:
    body = orjson.loads(orjson.dumps({"model": "m", **headers, "messages": messages}))
    fast, slow = _both(body, family)
    assert fast == slow
    assert [type(s) for s in fast.segments] == [type(s) for s in slow.segments]


def test_a_long_conversation_cuts_alike() -> None:
    messages = [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * (i % 50)}
        for i in range(3000)
    ]
    messages.insert(0, {"role": "system", "content": "be brief"})
    messages[1500] = {"role": "user", "content": [{"type": "text", "text": "listed"}]}
    fast, slow = _both({"model": "m", "messages": messages}, "openai")
    assert fast == slow


@settings(max_examples=300, deadline=None)
@given(values=st.lists(JSON, max_size=10))
def test_array_items_cuts_orjsons_array_as_the_walker_does(values: list[Any]) -> None:
    batch = orjson.dumps(values)
    items = locate.native_step("array_items")(batch)  # type: ignore[misc]
    assert items == [orjson.dumps(value) for value in values]
    spans = rawjson.trusted_children(batch, 0)[0]
    assert items == [batch[a:b] for a, b in zip(spans[1::3], spans[2::3], strict=True)]


@pytest.mark.parametrize("bad", [b"[1, 2]", b"{}", b"[", b'["a]', b"[[1]", b"[1]]", b""])
def test_array_items_refuses_what_orjson_does_not_write(bad: bytes) -> None:
    with pytest.raises(ValueError, match="compact JSON array"):
        locate.native_step("array_items")(bad)  # type: ignore[misc]


def test_first_long_and_roles_are_the_comprehensions() -> None:
    class Dict(dict[str, Any]):
        pass

    values: list[Any] = [
        {"role": "user", "content": "x" * 10},
        {"role": 3, "content": ["x" * 100]},
        Dict(role="user", content="y" * 100),
        "text",
        {"content": "z" * 100},
        {"role": "tool", "content": "w" * 101},
    ]
    first_long, roles = locate.native_step("first_long"), locate.native_step("roles")
    assert first_long is not None and roles is not None
    assert first_long(values, 99) == 4 and first_long(values, 100) == 5
    assert first_long(values, 101) is None and first_long([], 0) is None
    assert roles(values, 0, 6) == ["user", "", "", "", "", "tool"]
    assert roles(values, 4, 99) == ["", "tool"] and roles(values, 7, 9) == []


@settings(max_examples=50, deadline=None)
@given(
    digests=st.lists(st.binary(min_size=16, max_size=16).map(bytes.hex), max_size=40),
    after=st.none() | st.binary(min_size=16, max_size=16).map(bytes.hex),
)
def test_the_native_chain_is_the_python_chain(digests: list[str], after: str | None) -> None:
    native = chain_fingerprints("openai", "m", digests, after)
    previous = bytes.fromhex(after) if after is not None else chain_seed("openai", "m")
    links = []
    for hex_digest in digests:
        previous = xxhash.xxh3_128_digest(previous + bytes.fromhex(hex_digest))[:16]
        links.append(previous.hex())
    assert native == tuple(links)
    assert chain_fingerprints("openai", "m", tuple(digests), after) == tuple(links)


def test_a_digest_the_native_chain_cannot_read_takes_the_python_loop() -> None:
    digests = [os.urandom(16).hex() for _ in range(3)]
    odd = [digests[0], digests[1].upper(), " ".join([digests[2][:2], digests[2][2:]])]
    assert chain_fingerprints("openai", "m", odd) == chain_fingerprints("openai", "m", digests)
    short = [os.urandom(8).hex()]  # fromhex takes it: 24 bytes hashed, as before
    expected = xxhash.xxh3_128_digest(chain_seed("openai", "m") + bytes.fromhex(short[0]))
    assert chain_fingerprints("openai", "m", short) == (expected[:16].hex(),)


def test_absent_headers_are_the_parts_own_absent_segments() -> None:
    for family in ("openai", "anthropic", "vllm"):
        order = rule_for(family).header_order
        keys, headers = segments._absent_headers(order)
        assert headers == tuple(_header({}, part, []) for part in order)
        assert all(
            a is b for a, b in zip(headers, (_header({}, p, []) for p in order), strict=True)
        )
        assert {"tools", "functions", "thinking", "tool_choice", *order} <= keys


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.sampled_from(["x", "y", "z"]), max_size=12),
    b=st.lists(st.sampled_from(["x", "y", "z"]), max_size=12),
    matched=st.integers(0, 12),
)
def test_repaired_match_is_the_first_difference_after_the_break(
    a: list[str], b: list[str], matched: int
) -> None:
    current = build_record(split_request({"messages": []}, rule_for("openai")), rule_for("openai"))
    earlier = current
    current = _with_digests(current, a)
    earlier = _with_digests(earlier, b)
    end = min(len(a), len(b))
    index = min(matched + 1, end)
    while index < end and a[index] == b[index]:
        index += 1
    assert repaired_match(current, earlier, matched) == index


def _with_digests(rec: record.PrefixRecord, digests: list[str]) -> record.PrefixRecord:
    import dataclasses

    return dataclasses.replace(rec, segment_digests=tuple(digests), _chain=[])


def test_a_scan_of_known_clean_segments_is_the_full_scans_answer() -> None:
    rule = rule_for("openai")
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "plain words"},
            {"role": "user", "content": "request id 7f9c2ba4e88f827d616045507605853e"},
            {"role": "assistant", "content": "more plain words"},
            {"role": "user", "content": "the newest turn"},
        ],
    }
    request = split_request(body, rule)
    cache = ScanCache()
    first = scan_request(request, cache, ScanBudget(None))
    again = scan_request(request, cache, ScanBudget(None))  # all known now
    assert again == first and first[0]  # the id is found, from the cache too
    clean = split_request({**body, "messages": [body["messages"][0], body["messages"][3]]}, rule)
    scan_request(clean, cache, ScanBudget(None))
    assert scan_request(clean, cache, ScanBudget(None)) == ([], [])


def test_a_checker_answers_alike_with_and_without_the_shortcuts() -> None:
    rule = rule_for("openai")
    bodies = [
        {"model": "m", "messages": [{"role": "user", "content": f"Say hello ({i})."}]}
        for i in range(3)
    ]
    bodies.append({**bodies[0], "tools": [{"type": "function"}]})
    fast_checker, history_fast = PrefixChecker(), []
    results = []
    for body in bodies:
        check = fast_checker.check(body, rule, history_fast)
        history_fast.append(check.record)
        results.append(check)
    with pytest.MonkeyPatch.context() as patch:
        _python_steps(patch)
        slow_checker, history_slow = PrefixChecker(), []
        for body, fast in zip(bodies, results, strict=True):
            check = slow_checker.check(body, rule, history_slow)
            history_slow.append(check.record)
            assert check == fast
