"""Header policy, client auth, Host / Origin checks, rate limits and tool-definition pinning."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.gateway import (
    GatewayProc,
    Upstream,
    call_text,
    connect,
    eventually,
    fixtures,
    gateway_config,
    metric,
    running_gateway,
    start_fixture,
)
from toolkit.wire import admin_token

TOKEN, ADMIN = "client-token-1", "admin-token-1"
CHANGES = "toolfleet_gateway_tool_definition_changes_total"


@pytest.fixture(scope="module")
def guarded(replicas: list[Upstream]) -> Iterator[GatewayProc]:
    cfg = gateway_config({"fixture": [replicas[0].url]}, security={"tokens": [TOKEN], "admin_tokens": [ADMIN]})
    cfg["namespaces"]["fixture"]["headers"] = {
        "forward": ["x-session-id", "traceparent", "x-tenant"],
        "rename": {"X-Upstream-Authorization": "Authorization"},
        "static": {"x-gateway": "toolfleet"},
    }
    with running_gateway(cfg) as gw:
        yield gw


async def test_only_allowed_renamed_and_static_headers_reach_the_upstream(guarded: GatewayProc, transport: str) -> None:
    sent = {
        "authorization": f"Bearer {TOKEN}",
        "x-session-id": "resp_headers",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-tenant": "acme",
        "x-upstream-authorization": "Bearer upstream-secret",
        "x-secret": "do-not-forward",
        "proxy-authorization": "Basic hop",
    }
    async with connect(guarded.url("fixture", transport), transport, headers=sent) as client:
        got = json.loads(await call_text(client, "whoami"))["headers"]
        await call_text(client, "cleanup_session")
    assert got["x-session-id"] == "resp_headers"
    trace_id, parent = sent["traceparent"].split("-")[1:3]
    assert got["traceparent"].split("-")[1] == trace_id  # W3C trace context propagated, in the same trace,
    assert got["traceparent"].split("-")[2] != parent  # as a child of the gateway's own span
    assert got["x-tenant"] == "acme"
    assert got["authorization"] == "Bearer upstream-secret"  # renamed; the gateway's own token never leaks
    assert got["x-gateway"] == "toolfleet"
    assert not {"x-secret", "proxy-authorization", "x-upstream-authorization"} & got.keys()
    logs = guarded.logs()
    assert "upstream-secret" not in logs and TOKEN not in logs and "do-not-forward" not in logs


def test_clients_without_a_valid_bearer_token_are_refused(guarded: GatewayProc) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
        response = httpx.post(guarded.url("fixture"), json=init, headers=headers, trust_env=False)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"]["message"] == "missing or invalid bearer token"
    assert httpx.get(f"{guarded.base}/healthz", trust_env=False).status_code == 200
    assert (
        httpx.get(
            f"{guarded.base}/admin/tools", headers={"authorization": f"Bearer {TOKEN}"}, trust_env=False
        ).status_code
        == 401
    )


def test_foreign_hosts_and_origins_are_refused(guarded: GatewayProc) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    evil_host = httpx.post(
        guarded.url("fixture"), json=body, headers={**auth, "host": "evil.example:80"}, trust_env=False
    )
    assert evil_host.status_code == 403 and "Host" in evil_host.json()["error"]["message"]
    evil_origin = httpx.post(
        guarded.url("fixture"), json=body, headers={**auth, "origin": "http://evil.example"}, trust_env=False
    )
    assert evil_origin.status_code == 403 and "Origin" in evil_origin.json()["error"]["message"]
    same = httpx.post(
        guarded.url("fixture"),
        json=body,
        headers={**auth, "origin": f"http://127.0.0.1:{guarded.port}", "accept": "application/json, text/event-stream"},
        trust_env=False,
    )
    assert same.status_code != 403


def test_a_client_over_its_rate_limit_gets_429(replicas: list[Upstream]) -> None:
    cfg = gateway_config({"fixture": [replicas[0].url]}, security={"rate_per_s": 0.2, "rate_burst": 3})
    with running_gateway(cfg) as gw:
        codes = [httpx.get(gw.url("fixture"), trust_env=False).status_code for _ in range(6)]
        assert codes.count(429) >= 2, codes
        limited = httpx.get(gw.url("fixture"), trust_env=False)
        assert limited.json()["error"]["code"] == -32029 and limited.headers["retry-after"] == "1"


async def test_a_changed_tool_definition_is_refused_until_an_operator_approves_it() -> None:
    with fixtures("v1") as ups:
        port = ups[0].port
        with running_gateway(gateway_config({"fixture": [ups[0].url]})) as gw:
            async with connect(gw.url("fixture"), "streamable-http") as client:
                assert await call_text(client, "echo", {"text": "reviewed"}) == "reviewed"
            ups[0].kill()
            changed = start_fixture("v2", variant="b", port=port)  # same URL, the echo tool's description changed
            try:
                await eventually(
                    lambda: "echo" in httpx.get(f"{gw.base}/admin/tools", trust_env=False).json()["fixture"]["pending"],
                    what="noticing the changed definition",
                )
                for transport in ("streamable-http", "sse"):
                    async with connect(gw.url("fixture", transport), transport) as client:
                        names = {t.name for t in (await client.list_tools()).tools}
                        assert "echo" not in names and "add" in names
                        with pytest.raises(MCPError) as refused:
                            await call_text(client, "echo", {"text": "x"})
                        assert refused.value.error.code == -32006 and "approve" in refused.value.error.message
                assert metric(gw.base, CHANGES, namespace="fixture", tool="echo") == 1
                async with httpx.AsyncClient(trust_env=False) as http:
                    approved = await http.post(f"{gw.base}/admin/tools/fixture/approve")
                assert approved.json() == {"approved": ["echo"]}
                async with connect(gw.url("fixture"), "streamable-http") as client:
                    tools = {t.name: t for t in (await client.list_tools()).tools}
                    assert "SECRETS" in (tools["echo"].description or "")
                    assert await call_text(client, "echo", {"text": "now fine"}) == "now fine"
            finally:
                changed.kill()


async def test_in_flag_mode_a_changed_tool_passes_but_is_flagged_until_an_operator_rejects_it() -> None:
    with fixtures("v1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]})
        cfg["namespaces"]["fixture"]["tool_pinning"] = "flag"
        with running_gateway(cfg) as gw:
            port = ups[0].port
            ups[0].kill()
            changed = start_fixture("v2", variant="b", port=port)
            try:
                await eventually(
                    lambda: metric(gw.base, CHANGES, namespace="fixture", tool="echo") >= 1, what="the change flagged"
                )
                async with connect(
                    gw.url("fixture"), "streamable-http", headers={"x-session-id": uuid.uuid4().hex}
                ) as client:
                    assert await call_text(client, "echo", {"text": "flagged"}) == "flagged"
                assert "tools.changed" in gw.logs()
                async with httpx.AsyncClient(base_url=gw.base, trust_env=False) as http:
                    pending = (await http.get("/admin/tools")).json()["fixture"]
                    assert "SECRETS" in pending["definitions"]["echo"]["pending"]  # the texts a diff is made of
                    assert "SECRETS" not in pending["definitions"]["echo"]["approved"]
                    assert (await http.post("/admin/tools/fixture/reject")).json() == {"rejected": ["echo"]}
                    after = (await http.get("/admin/tools")).json()["fixture"]
                    status = (await http.get("/admin/status")).json()["namespaces"]["fixture"]
                assert after["pending"] == {} and list(after["rejected"]) == ["echo"]
                assert status["rejected_tools"] == ["echo"]
                async with connect(gw.url("fixture"), "streamable-http") as client:  # refused in flag mode too
                    assert "echo" not in {t.name for t in (await client.list_tools()).tools}
                    with pytest.raises(MCPError) as refused:
                        await call_text(client, "echo", {"text": "x"})
                    assert refused.value.error.code == -32006
            finally:
                changed.kill()


def test_admin_is_the_fleet_token_or_an_unrelayed_local_caller(gateway: GatewayProc, guarded: GatewayProc) -> None:
    """With no admin token configured a caller on loopback is the admin, but not one a proxy on this host relayed
    (it would make every client the proxy fronts an admin); the fleet's own token (the console's) always is."""
    fleet = {"authorization": f"Bearer {admin_token()}"}

    def status(gw: GatewayProc, headers: dict[str, str]) -> int:
        return httpx.get(f"{gw.base}/admin/status", headers=headers, trust_env=False).status_code

    assert status(gateway, {}) == 200
    for relayed in ({"x-forwarded-for": "203.0.113.9"}, {"forwarded": "for=203.0.113.9"}, {"x-real-ip": "1.2.3.4"}):
        assert status(gateway, relayed) == 401
        assert status(gateway, {**relayed, **fleet}) == 200
    assert status(guarded, {}) == 401  # an admin token is configured: loopback alone is not enough
    tampered = admin_token()[:-1] + ("1" if admin_token().endswith("0") else "0")
    assert status(guarded, {"authorization": f"Bearer {tampered}"}) == 401
    assert status(guarded, fleet) == 200 and status(guarded, {"authorization": f"Bearer {ADMIN}"}) == 200
