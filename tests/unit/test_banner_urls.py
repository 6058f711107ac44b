"""The banner's URLs: where the gateway listens, and a base_url a client can really use."""

from __future__ import annotations

import pytest

from gateway.cli import _urls


@pytest.mark.parametrize(
    ("host", "listening", "base"),
    [
        ("127.0.0.1", "http://127.0.0.1:4000/v1", "http://127.0.0.1:4000/v1"),
        ("localhost", "http://localhost:4000/v1", "http://localhost:4000/v1"),
        ("0.0.0.0", "http://0.0.0.0:4000/v1 (every interface)", "http://127.0.0.1:4000/v1"),
        ("::", "http://[::]:4000/v1 (every interface)", "http://127.0.0.1:4000/v1"),
        ("::1", "http://[::1]:4000/v1", "http://[::1]:4000/v1"),
        ("10.1.2.3", "http://10.1.2.3:4000/v1", "http://10.1.2.3:4000/v1"),
    ],
)
def test_the_sdk_line_names_an_address_a_client_can_connect_to(
    host: str, listening: str, base: str
) -> None:
    assert _urls(host, 4000) == (listening, base)
