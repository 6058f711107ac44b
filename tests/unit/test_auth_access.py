"""The route table: every route of the app is classified, and each class admits whom it says."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.app import create_app
from gateway.auth.access import ACCESS, RouteClass, markdown_table, refusal, route_class
from gateway.auth.authenticate import authenticate
from gateway.auth.credentials import credential_of
from gateway.auth.principal import ADMIN, OPEN, Principal
from gateway.config import parse_config
from gateway.errors import AuthenticationError
from gateway.keys.model import KeyAttributes, KeyRecord
from gateway.settings import Settings

NOW = datetime(2026, 12, 1, tzinfo=UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _key(
    role: str = "member", revoked_at: datetime | None = None, expires_at: datetime | None = None
) -> KeyRecord:
    return KeyRecord(
        id="key_abc",
        prefix="fbx-abcd1234",
        secret_hash="0" * 64,
        attributes=KeyAttributes(role=role, team="t"),  # type: ignore[arg-type]
        created_at=NOW - timedelta(days=1),
        revoked_at=revoked_at,
        expires_at=expires_at,
    )


def test_every_route_of_the_app_has_a_class(tmp_path: Path) -> None:
    config = parse_config("models:\n  m:\n    model: m\n    base_url: http://127.0.0.1:9/v1\n")
    app = create_app(Settings(data_dir=tmp_path), config)
    paths = set(app.openapi()["paths"])  # routers' routes, and those of the app itself:
    for route in app.routes:
        paths.add(getattr(route, "path", None))
        # FastAPI >= 0.160 nests included routers: walk them, schema or not
        for context in getattr(route, "effective_route_contexts", list)():
            paths.add(getattr(context, "path", None))
    paths.discard(None)
    assert "/v1/chat/completions" in paths and "/metrics" in paths
    missing = sorted(str(p) for p in paths if route_class(str(p)) is None)
    assert not missing, f"routes with no class in gateway/auth/access.py ROUTES: {missing}"


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        ("/healthz", RouteClass.PUBLIC),
        ("/admin/reload", RouteClass.ADMIN),
        ("/admin/keys/key_1", RouteClass.ADMIN),
        ("/v1/chat/completions", RouteClass.MODEL),
        ("/v1/messages", RouteClass.MODEL),
        ("/v1/responses/resp_1", RouteClass.MODEL),  # GET and DELETE: a team's own
        ("/v1/responses/resp_1/input_items", RouteClass.MODEL),
        ("/v1/tasks/t-1/finish", RouteClass.TASK_WRITE),
        ("/v1/tasks/t-1", RouteClass.READ),
        ("/v1/spend/tasks", RouteClass.READ),
        ("/readyz", RouteClass.READ),
        ("/metrics", RouteClass.METRICS),
        ("/nowhere", None),
    ],
)
def test_paths_take_their_class(path: str, cls: RouteClass | None) -> None:
    assert route_class(path) is cls


@pytest.mark.parametrize(
    ("cls", "admin", "member", "service", "finance"),
    [
        (RouteClass.ADMIN, True, False, False, False),
        (RouteClass.MODEL, False, True, True, False),
        (RouteClass.READ, True, True, True, True),
        (RouteClass.TASK_WRITE, True, True, True, False),
        (RouteClass.METRICS, True, False, False, True),
        (RouteClass.UNKNOWN, True, True, True, True),
    ],
)
def test_who_may_call_each_class(
    cls: RouteClass, admin: bool, member: bool, service: bool, finance: bool
) -> None:
    principals = [ADMIN, *(Principal("key", _key(role)) for role in ("member", "service"))]
    principals.append(Principal("key", _key("finance")))
    for principal, allowed in zip(principals, (admin, member, service, finance), strict=True):
        reason = refusal(cls, principal)
        assert (reason is None) is allowed, (cls, principal.role, reason)
        assert refusal(cls, OPEN) is None  # the open mode lets everyone through


def test_refusals_say_why() -> None:
    assert refusal(RouteClass.ADMIN, Principal("key", _key())) == (
        "admin endpoints take the admin key, not a virtual key"
    )
    assert "finance keys" in str(refusal(RouteClass.MODEL, Principal("key", _key("finance"))))
    assert "admin key makes none" in str(refusal(RouteClass.MODEL, ADMIN))


def test_docs_show_the_table_of_access_py() -> None:
    section = DOCS.read_text().split("## Who may call what", 1)[1].split("\n## ", 1)[0]
    assert markdown_table() in section, "regenerate with gateway.auth.access.markdown_table()"
    assert set(ACCESS) == set(RouteClass)


def _lookup(record: KeyRecord | None) -> Callable[[str], KeyRecord | None]:
    return lambda secret: record if secret == "fbx-abcd1234-secret" else None


def test_authenticate_modes() -> None:
    lookup = _lookup(_key())
    assert authenticate(None, admin_key=None, lookup=lookup, clock=lambda: NOW) is OPEN
    assert authenticate("adm", admin_key=b"adm", lookup=lookup, clock=lambda: NOW) is ADMIN
    secret = "fbx-abcd1234-secret"
    principal = authenticate(secret, admin_key=b"adm", lookup=lookup, clock=lambda: NOW)
    assert principal.kind == "key" and principal.team == "t"


@pytest.mark.parametrize(
    ("credential", "record", "fragment"),
    [
        (None, None, "no API key"),
        ("nope", None, "invalid API key"),
        ("fbx-abcd1234-secret", _key(revoked_at=NOW - timedelta(hours=1)), "was revoked"),
        ("fbx-abcd1234-secret", _key(expires_at=NOW), "was expired"),
    ],
)
def test_authenticate_says_why_and_never_echoes_the_secret(
    credential: str | None, record: KeyRecord | None, fragment: str
) -> None:
    with pytest.raises(AuthenticationError) as caught:
        authenticate(credential, admin_key=b"adm", lookup=_lookup(record), clock=lambda: NOW)
    assert fragment in caught.value.message
    assert "secret" not in caught.value.message and "nope" not in caught.value.message
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], None),
        ([(b"authorization", b"Bearer k1")], "k1"),  # ASGI names are lower-case
        ([(b"authorization", b"bearer  k1 ")], "k1"),
        ([(b"x-api-key", b"k2")], "k2"),
        ([(b"authorization", b"Bearer k1"), (b"x-api-key", b"k1")], "k1"),
        ([(b"authorization", b"Bearer")], None),
    ],
)
def test_credentials_from_either_header(
    headers: list[tuple[bytes, bytes]], expected: str | None
) -> None:
    assert credential_of(headers) == expected


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ([(b"authorization", b"Bearer k1"), (b"x-api-key", b"k2")], "two different keys"),
        ([(b"authorization", b"Basic dXNlcjpwdw==")], "must be `Bearer <key>`"),
    ],
)
def test_bad_credential_headers_are_401(headers: list[tuple[bytes, bytes]], fragment: str) -> None:
    with pytest.raises(AuthenticationError, match=fragment.replace("`", ".")):
        credential_of(headers)


def test_websockets_are_refused_with_a_key_configured(tmp_path: Path) -> None:
    config = parse_config("models:\n  m:\n    model: m\n    base_url: http://127.0.0.1:9/v1\n")

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("in")

    for admin_key, reached in (("adm", False), (None, True)):
        settings = Settings(data_dir=tmp_path / str(admin_key), admin_key=admin_key)  # type: ignore[arg-type]
        app = create_app(settings, config)
        app.add_api_websocket_route("/v1/socket", echo)
        with TestClient(app) as client:
            if reached:
                with client.websocket_connect("/v1/socket") as socket:
                    assert socket.receive_text() == "in"
            else:
                headers = {"x-api-key": "adm"}
                with (
                    pytest.raises(WebSocketDisconnect) as closed,
                    client.websocket_connect("/v1/socket", headers=headers),
                ):
                    pass
                assert closed.value.code == 1008
