"""Issue 32, finding 2: every spelling of a protected path is refused, or authenticated exactly like the path itself.

`GET //admin/tools` used to answer 200 without the admin token: the auth check read the path as sent, the router
with its slashes stripped. The real gateway (with a client token and an admin token) runs in front of a real
fixture MCP server; requests go out byte for byte (`tests.gateway.raw`), as httpx would normalise their paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.raw import request
from tests.support.gateway import ACCEPT, INIT, GatewayProc, fixtures, gateway_config, running_gateway

CLIENT, ADMIN = "client-token-1", "admin-token-1"
TOKENS = {"none": None, "client": CLIENT, "admin": ADMIN}
ROUTES = [
    ("GET", "/admin/tools"),
    ("GET", "/admin/status"),
    ("POST", "/admin/tools/fixture/approve"),
    ("GET", "/metrics"),
    ("POST", "/fixture/mcp"),
    ("POST", "/fixture/messages/"),
]
"""Every route that asks for a token: the admin ones (admin token) and the rest (client token)."""
HTTP = settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayProc]:
    with fixtures("r1") as ups:
        security = {"tokens": [CLIENT], "admin_tokens": [ADMIN]}
        with running_gateway(gateway_config({"fixture": [ups[0].url]}, security=security)) as proc:
            yield proc


def status(gw: GatewayProc, method: str, path: str, token: str | None) -> int:
    headers = {**ACCEPT, **({"authorization": f"Bearer {token}"} if token else {})}
    body = json.dumps(INIT).encode() if method == "POST" else None
    return request(gw.port, method, path, body, **headers)[0]


@pytest.mark.parametrize("path", ["//admin/tools", "///admin/tools", "/./admin/tools", "/x/../admin/tools"])
@pytest.mark.parametrize("token", ["none", "client"])
def test_an_admin_route_spelled_otherwise_still_wants_the_admin_token(gw: GatewayProc, path: str, token: str) -> None:
    assert status(gw, "GET", path, TOKENS[token]) in (400, 401)
    assert status(gw, "POST", path.replace("tools", "tools/fixture/approve"), TOKENS[token]) in (400, 401)


@pytest.mark.parametrize("path", ["/admin%2Ftools", "/admin%252Ftools", "/admin/tools%00", "/admin\\tools", "/../x"])
def test_an_ambiguous_path_is_refused_with_400(gw: GatewayProc, path: str) -> None:
    assert status(gw, "GET", path, ADMIN) == 400


def test_the_canonical_routes_answer_as_before(gw: GatewayProc) -> None:
    assert status(gw, "GET", "/admin/tools", ADMIN) == 200
    assert status(gw, "GET", "/admin/tools", CLIENT) == 401
    assert status(gw, "GET", "/metrics", CLIENT) == 200
    assert status(gw, "GET", "/metrics", None) == 401
    assert status(gw, "GET", "/healthz", None) == 200


@st.composite
def spellings(draw: st.DrawFn, path: str) -> str:
    """`path` with the same meaning written otherwise: doubled slashes, `.` and `x/..` segments, percent-encoded
    letters, a trailing slash."""
    out = []
    for segment in path.strip("/").split("/"):
        out.append("/" * draw(st.integers(1, 3)))
        out += draw(st.sampled_from(["", "./", "zz/../", "./zz/%2e%2e/"]))
        letters = [f"%{ord(c):02X}" if c.isalpha() and draw(st.booleans()) else c for c in segment]
        out.append("".join(letters))
    out.append(draw(st.sampled_from(["", "/", "//", "/."])))
    return "".join(out)


@HTTP
@given(data=st.data(), route=st.sampled_from(ROUTES), token=st.sampled_from(sorted(TOKENS)))
def test_any_spelling_of_a_protected_route_is_authenticated_like_the_route(
    gw: GatewayProc, data: st.DataObject, route: tuple[str, str], token: str
) -> None:
    method, path = route
    spelled = data.draw(spellings(path))
    assert status(gw, method, spelled, TOKENS[token]) == status(gw, method, path, TOKENS[token]), spelled


@HTTP
@given(
    route=st.sampled_from([r for r in ROUTES if r[1].startswith("/admin")]),
    case=st.lists(st.booleans(), min_size=30, max_size=30),
    token=st.sampled_from(["none", "client"]),
)
def test_no_case_spelling_of_an_admin_route_is_served_without_the_admin_token(
    gw: GatewayProc, route: tuple[str, str], case: list[bool], token: str
) -> None:
    method, path = route
    spelled = "".join(c.upper() if flip else c for c, flip in zip(path, case, strict=False))
    assert status(gw, method, spelled, TOKENS[token]) >= 400, spelled
