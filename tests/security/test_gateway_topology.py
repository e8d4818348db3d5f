"""Issue 32, finding 16 (the gateway's side): replica URLs reach authenticated operators only.

`/readyz` (unauthenticated) says ready or not, with counts; `/admin/status` (admin token) names the replicas; an
error sent to a client names the namespace, never a replica's URL. The real gateway, with an admin token, in
front of two real fixture MCP servers, one of which the test kills.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.gateway import GatewayProc, Upstream, call_text, connect, fixtures, gateway_config, running_gateway

ADMIN = "admin-token-2"
SESSION_LOST = -32002


@pytest.fixture(scope="module")
def ups() -> Iterator[list[Upstream]]:
    with fixtures("r1", "r2") as started:
        yield started


@pytest.fixture(scope="module")
def gw(ups: list[Upstream]) -> Iterator[GatewayProc]:
    cfg = gateway_config({"fixture": [ups[0].url], "doomed": [ups[1].url]}, security={"admin_tokens": [ADMIN]})
    with running_gateway(cfg) as proc:
        yield proc


def test_readyz_says_ready_and_counts_without_naming_replicas(gw: GatewayProc, ups: list[Upstream]) -> None:
    ready = httpx.get(f"{gw.base}/readyz", trust_env=False)
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert all(str(up.port) not in ready.text for up in ups), ready.text


def test_replica_details_need_the_admin_token(gw: GatewayProc, ups: list[Upstream]) -> None:
    url = f"{gw.base}/admin/status"
    assert httpx.get(url, trust_env=False).status_code == 401
    status = httpx.get(url, headers={"authorization": f"Bearer {ADMIN}"}, trust_env=False)
    assert status.status_code == 200
    assert status.json()["namespaces"]["fixture"]["replicas"] == {ups[0].url: "up"}


async def test_a_lost_session_names_its_namespace_not_its_replica(gw: GatewayProc, ups: list[Upstream]) -> None:
    doomed = ups[1]
    async with connect(gw.url("doomed"), "streamable-http", headers={"x-session-id": "topology"}) as client:
        assert (await call_text(client, "count")).endswith(":1")
        doomed.kill()
        with pytest.raises(MCPError) as lost:
            await call_text(client, "count")
    error = lost.value.error
    assert error.code == SESSION_LOST and "'doomed'" in error.message
    shown = error.message + json.dumps(error.data)
    assert doomed.url not in shown and str(doomed.port) not in shown, shown
