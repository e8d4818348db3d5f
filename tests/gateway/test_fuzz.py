"""Generated malformed and oversized JSON-RPC against both transports of a real gateway process.

Every answer must be a JSON-RPC error or an HTTP 2xx/4xx, never a 5xx or a hang; afterwards the
gateway still serves and holds no more pinned sessions than before. Each property runs for a few
seconds (`max_examples` and a deadline bound it), against the fixture upstreams on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.harness import ACCEPT, INIT, GatewayProc, Upstream, fixtures, gateway_config, metric, running_gateway

LIMIT = 4096
"""The gateway's body limit here, small so that oversized bodies cost little to generate."""
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
methods = st.sampled_from(["tools/call", "tools/list", "ping", "resources/read", "prompts/get", ""]) | st.text(
    max_size=30
)
"""Never `initialize`: a valid handshake legitimately opens a session, which is not what is fuzzed."""
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | scalars,
        "id": st.integers() | st.text(max_size=10) | json_values,
        "method": methods | json_values,
        "params": json_values | st.fixed_dictionaries({"name": st.text(max_size=20) | json_values}),
    },
)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    envelopes.map(lambda v: json.dumps(v).encode()),
    st.integers(LIMIT + 1, LIMIT * 4).map(lambda n: b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"a" * n),
)


@pytest.fixture(scope="module")
def upstreams() -> Iterator[list[Upstream]]:
    with fixtures("f1", "f2") as ups:
        yield ups


@pytest.fixture(scope="module")
def gw(upstreams: list[Upstream]) -> Iterator[GatewayProc]:
    cfg = gateway_config({"fixture": [u.url for u in upstreams]}, security={"max_body_bytes": LIMIT})
    with running_gateway(cfg) as proc:
        yield proc


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10, trust_env=False) as c:
        yield c


def pins(gw: GatewayProc, upstreams: list[Upstream]) -> float:
    gauge = "toolfleet_gateway_sessions_active"
    return sum(metric(gw.base, gauge, namespace="fixture", replica=u.url) for u in upstreams)


def check_answer(response: httpx.Response) -> None:
    """A 2xx, or a 4xx whose JSON body is a JSON-RPC error; never a 5xx."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        body: Any = response.json()
        assert body.get("jsonrpc") == "2.0" and isinstance(body["error"]["code"], int), body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], body


def still_serves(gw: GatewayProc, client: httpx.Client) -> None:
    """A fresh MCP session still opens through the gateway, and ends when deleted."""
    answer = client.post(gw.url("fixture"), json=INIT, headers=ACCEPT)
    assert answer.status_code == 200, answer.text
    sid = answer.headers["mcp-session-id"]
    assert client.request("DELETE", gw.url("fixture"), headers={"mcp-session-id": sid}).status_code == 200


def test_streamable_post_bodies(gw: GatewayProc, upstreams: list[Upstream], client: httpx.Client) -> None:
    before = pins(gw, upstreams)

    @FUZZ
    @given(body=bodies, keyed=st.booleans())
    def post(body: bytes, keyed: bool) -> None:
        headers = {**ACCEPT, **({"x-session-id": "fuzz-key"} if keyed else {})}
        response = client.post(gw.url("fixture"), content=body, headers=headers)
        check_answer(response)
        # a message the gateway refused before routing (or a non-initialize call) must leave no session
        assert "mcp-session-id" not in response.headers, response.headers

    post()
    still_serves(gw, client)
    client.request("DELETE", gw.url("fixture"), headers={"x-session-id": "fuzz-key"})
    assert pins(gw, upstreams) <= before + 1  # at most the one key the fuzz used, and only if a call routed


def test_legacy_messages_bodies(gw: GatewayProc, upstreams: list[Upstream], client: httpx.Client) -> None:
    before = pins(gw, upstreams)
    with client.stream("GET", gw.url("fixture", "sse")) as stream:
        lines = stream.iter_lines()
        endpoint = next(line[len("data: ") :] for line in lines if line.startswith("data: "))
        messages = httpx.URL(gw.base).join(endpoint)

        @FUZZ
        @given(body=bodies)
        def post(body: bytes) -> None:
            check_answer(client.post(messages, content=body, headers=ACCEPT))

        post()
        still_serves(gw, client)
    # the SSE connection closed: its gateway session and pins go with it
    assert pins(gw, upstreams) <= before
    after = client.post(messages, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=ACCEPT)
    assert after.status_code == 404 and after.json()["error"]["code"] == -32001
