"""`Cycle` renders a head from its names' template (`bytes %`): same bytes as uvicorn's.

A `%` is a token character, so it may stand in a name (doubled in the template) and in a
value (filled in as it is); the framing headers are read where the template says they are.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http_cycle import Cycle
from tests.unit.test_http_cycle import _body, _run, _start

CASES = {
    "percent in a name": [(b"x-%s%d%%", b"1"), (b"content-length", b"0")],
    "percent in a value": [(b"x-rate", b"100%"), (b"x-f", b"%b%s%%"), (b"content-length", b"0")],
    "upper-case name with a percent": [(b"X-%B", b"v"), (b"Content-Length", b"0")],
    "framing in the middle": [(b"x-a", b"1"), (b"content-length", b"0"), (b"x-b", b"2")],
    "close after length": [(b"content-length", b"0"), (b"Connection", b"close"), (b"x-c", b"3")],
    "empty value": [(b"x-empty", b""), (b"content-length", b"0")],
    "no headers": [],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_templated_head_is_uvicorns_head(name: str, keep_alive: bool) -> None:
    messages = [_start(CASES[name]), _body()]
    for _ in range(2):  # the first builds the template, the second reads it
        ours = asyncio.run(_run(Cycle, messages, "POST", keep_alive))
        assert ours == asyncio.run(_run(RequestResponseCycle, messages, "POST", keep_alive))


def test_random_heads_of_token_names_and_values_are_uvicorns() -> None:
    rng = random.Random(12)
    tokens = b"abcXYZ-_%!#$&'*+.^`|~019"
    texts = bytes(range(32, 127)) + b"\t\x80\xff"
    names = [bytes(rng.choices(tokens, k=rng.randint(1, 6))) for _ in range(12)]
    names += [b"content-length", b"connection", b"transfer-encoding"]
    for _ in range(300):
        headers = []
        for name in rng.sample(names, rng.randint(0, 6)):
            if name == b"content-length":
                value = b"0"
            else:
                value = bytes(rng.choices(texts, k=rng.randint(0, 8)))
            headers.append((name, value))
        messages = [_start(headers), _body()]
        ours = asyncio.run(_run(Cycle, messages, "POST", True))
        assert ours == asyncio.run(_run(RequestResponseCycle, messages, "POST", True))
