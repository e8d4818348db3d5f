"""Generated malformed and oversized JSON-RPC against both transports of a real gateway process.

Every answer must be a JSON-RPC error or an HTTP 2xx/4xx, never a 5xx or a hang; afterwards the
gateway still serves and holds no more pinned sessions than before. Each property runs for a few
seconds (`max_examples` and a deadline bound it), against the fixture upstreams on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.gateway import ACCEPT, INIT, GatewayProc, Upstream, fixtures, gateway_config, metric, running_gateway
from tests.support.jsonrpc_fuzz import bodies, check_answer

LIMIT = 4096
"""The gateway's body limit here, small so that oversized bodies cost little to generate."""
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

BODIES = bodies(LIMIT)


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


def still_serves(gw: GatewayProc, client: httpx.Client) -> None:
    """A fresh MCP session still opens through the gateway, and ends when deleted."""
    answer = client.post(gw.url("fixture"), json=INIT, headers=ACCEPT)
    assert answer.status_code == 200, answer.text
    sid = answer.headers["mcp-session-id"]
    assert client.request("DELETE", gw.url("fixture"), headers={"mcp-session-id": sid}).status_code == 200


def test_streamable_post_bodies(gw: GatewayProc, upstreams: list[Upstream], client: httpx.Client) -> None:
    before = pins(gw, upstreams)

    @FUZZ
    @given(body=BODIES, keyed=st.booleans())
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
        @given(body=BODIES)
        def post(body: bytes) -> None:
            check_answer(client.post(messages, content=body, headers=ACCEPT))

        post()
        still_serves(gw, client)
    # the SSE connection closed: its gateway session and pins go with it
    assert pins(gw, upstreams) <= before
    after = client.post(messages, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=ACCEPT)
    assert after.status_code == 404 and after.json()["error"]["code"] == -32001
