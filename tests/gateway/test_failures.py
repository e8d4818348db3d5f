"""Replicas that die, no healthy replica at all, slow and garbage upstreams: precise errors, no leaks."""

from __future__ import annotations

import time
import uuid

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.asgi import free_port
from tests.support.gateway import (
    GatewayProc,
    call_text,
    connect,
    eventually,
    fixtures,
    gateway_config,
    metric,
    running_gateway,
    start_fixture,
)
from tests.support.mcp1 import arun_mcp1_client

SESSION_LOST, UNAVAILABLE, TIMEOUT, BAD_UPSTREAM = -32002, -32003, -32004, -32005


def _sid() -> str:
    return f"resp_{uuid.uuid4().hex[:12]}"


def _wait(predicate, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.1)


def _state(gw: GatewayProc, replica: str) -> str:
    return httpx.get(f"{gw.base}/admin/status", trust_env=False).json()["namespaces"]["fixture"]["replicas"][replica]


async def test_a_killed_replica_loses_its_sessions_loudly_and_new_sessions_go_elsewhere(transport: str) -> None:
    with fixtures("r1", "r2") as ups, running_gateway(gateway_config({"fixture": [u.url for u in ups]})) as gw:
        sid = _sid()
        url = gw.url("fixture", transport)
        async with connect(url, transport, headers={"x-session-id": sid}, mode="legacy") as client:
            replica = (await call_text(client, "count")).split(":")[0]
            victim = next(u for u in ups if u.replica == replica)
            victim.kill()
            with pytest.raises(MCPError) as lost:
                await call_text(client, "count")
        assert lost.value.error.code == SESSION_LOST
        assert sid in lost.value.error.message and "lost" in lost.value.error.message
        # the same session id keeps failing loudly rather than silently starting afresh elsewhere
        async with connect(url, transport, headers={"x-session-id": sid}) as client:
            with pytest.raises(MCPError) as again:
                await call_text(client, "count")
        assert again.value.error.code == SESSION_LOST
        survivor = next(u for u in ups if u is not victim)
        async with connect(url, transport, headers={"x-session-id": _sid()}) as client:
            assert (await call_text(client, "count")).startswith(survivor.replica)
        assert metric(gw.base, "toolfleet_gateway_upstream_healthy", namespace="fixture", replica=victim.url) == 0
        async with httpx.AsyncClient(trust_env=False) as http:
            assert (await http.get(f"{gw.base}/readyz")).status_code == 200


async def test_a_replica_dying_mid_call_answers_that_call_with_the_lost_session(transport: str) -> None:
    with fixtures("r1") as ups, running_gateway(gateway_config({"fixture": [ups[0].url]})) as gw:
        sid = _sid()
        async with connect(gw.url("fixture", transport), transport, headers={"x-session-id": sid}) as client:
            await call_text(client, "count")
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, lambda: (time.sleep(0.5), ups[0].kill()))
                with pytest.raises(MCPError) as lost:
                    await call_text(client, "sleep", {"seconds": 10})
        assert lost.value.error.code == SESSION_LOST and sid in lost.value.error.message


async def test_discovery_is_answered_from_the_last_known_tools_while_no_replica_is_healthy(transport: str) -> None:
    with fixtures("r1") as ups, running_gateway(gateway_config({"fixture": [ups[0].url]})) as gw:
        ups[0].kill()
        _wait(lambda: _state(gw, ups[0].url) == "down")
        # what vLLM does at start-up: a 1.x client over SSE, initialize + tools/list
        out = await arun_mcp1_client(gw.url("fixture", transport), [{"op": "list_tools"}], transport=transport)
        assert out["server_info"]["name"] == "fixture"
        assert "echo" in {t["name"] for t in out["results"][0]["tools"]}
        async with connect(gw.url("fixture", transport), transport, mode="legacy") as client:
            assert client.server_info is not None and client.server_info.name == "fixture"
            assert "add" in {t.name for t in (await client.list_tools()).tools}
            with pytest.raises(MCPError) as unavailable:
                await call_text(client, "add", {"a": 1, "b": 2})
        assert unavailable.value.error.code == UNAVAILABLE and "fixture" in unavailable.value.error.message
        # a 2026-07-28 listing says how long it keeps, as that era requires: a stale one, not at all
        body, headers = _modern_call("add", {})
        body |= {"method": "tools/list", "params": {"_meta": body["params"]["_meta"]}}  # type: ignore[index]
        headers = {k: v for k, v in headers.items() if k != "mcp-name"} | {"mcp-method": "tools/list"}
        async with httpx.AsyncClient(trust_env=False) as http:
            listed = (await http.post(gw.url("fixture"), json=body, headers=headers)).json()["result"]
        assert "add" in {t["name"] for t in listed["tools"]}
        assert (listed["ttlMs"], listed["cacheScope"], listed["resultType"]) == (0, "private", "complete")
        # the replica comes back on the same port: new sessions work again
        back = start_fixture("r1b", port=ups[0].port)
        try:
            _wait(lambda: _state(gw, ups[0].url) == "up")
            async with connect(gw.url("fixture", transport), transport) as client:
                assert await call_text(client, "add", {"a": 1, "b": 2}) == "3"
        finally:
            back.kill()


async def test_a_gateway_started_before_its_tool_answers_the_first_call_without_waiting_out_the_circuit(
    transport: str,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    cfg = gateway_config({"fixture": [url]}, health={"interval_s": 600, "open_s": 600})  # no re-probe in this test
    with running_gateway(cfg, ready=False) as gw:
        await eventually(lambda: _state(gw, url) == "down", what="the start-up probe finding no tool server")
        body, headers = _modern_call("add", {"a": 1, "b": 2})
        async with httpx.AsyncClient(trust_env=False) as http:  # still no tool: the probe made for this call fails
            early = (await http.post(gw.url("fixture"), json=body, headers=headers)).json()
        assert early["error"]["code"] == UNAVAILABLE
        late = start_fixture("late", port=port)  # what a swarm does: the tool comes up after the gateway
        try:
            async with connect(gw.url("fixture", transport), transport, headers={"x-session-id": _sid()}) as client:
                assert await call_text(client, "add", {"a": 2, "b": 3}) == "5"
            assert _state(gw, url) == "up"
        finally:
            late.kill()


async def test_a_slow_upstream_gets_a_timeout_error_and_the_gateway_keeps_serving() -> None:
    with fixtures("r1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]})
        cfg["namespaces"]["fixture"]["timeout_s"] = 1
        with running_gateway(cfg) as gw:
            async with connect(gw.url("fixture"), "streamable-http") as client:
                with pytest.raises(MCPError) as slow:
                    await call_text(client, "sleep", {"seconds": 3})
                assert slow.value.error.code == TIMEOUT and "timed out" in slow.value.error.message
                assert await call_text(client, "echo", {"text": "still here"}) == "still here"


@pytest.mark.parametrize("mode", ["html", "badjson", "badsse", "hugeint"])
async def test_an_upstream_that_answers_garbage_gets_a_precise_error_and_leaks_no_pin(mode: str) -> None:
    up = start_fixture("junk", garbage=mode)
    try:
        cfg = gateway_config({"junk": [up.url]}, health={"interval_s": 600, "failures_to_open": 5})
        with running_gateway(cfg) as gw:
            for _ in range(2):
                async with httpx.AsyncClient(trust_env=False) as http:
                    response = await http.post(
                        gw.url("junk"),
                        headers={"x-session-id": _sid(), "accept": "application/json, text/event-stream"},
                        json={"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}},
                    )
                body = response.json() if response.headers["content-type"].startswith("application/json") else None
                if body is None:  # an SSE answer carries the error as its last event
                    body = __import__("json").loads(response.text.strip().split("data: ")[-1])
                assert body["id"] == 7 and body["error"]["code"] == BAD_UPSTREAM, body
                assert "'junk'" in body["error"]["message"] and up.url not in body["error"]["message"]
            assert metric(gw.base, "toolfleet_gateway_sessions_active", namespace="junk", replica=up.url) == 0
            async with httpx.AsyncClient(trust_env=False) as http:
                assert (await http.get(f"{gw.base}/healthz")).status_code == 200
    finally:
        up.kill()


MODERN = "2026-07-28"


def _modern_call(tool: str, args: dict[str, object]) -> tuple[dict[str, object], dict[str, str]]:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta},
    }
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    return body, headers


async def test_a_new_session_goes_to_another_replica_when_the_first_refuses_the_connection() -> None:
    with fixtures("r1", "r2") as ups:
        cfg = gateway_config({"fixture": [u.url for u in ups]}, health={"interval_s": 600})
        with running_gateway(cfg) as gw:
            ups[0].kill()  # the gateway has not noticed: its next pick is r1
            async with connect(gw.url("fixture"), "streamable-http", mode="legacy") as client:
                assert await call_text(client, "add", {"a": 1, "b": 2}) == "3"  # initialize was retried on r2
                assert client.server_info is not None and client.server_info.name == "fixture"
        ups[0] = start_fixture("r1", port=ups[0].port)
        with running_gateway(cfg) as gw:
            ups[0].kill()  # stopped (or draining after SIGTERM): its port refuses connections
            # A stateless call is no safe method, but it never reached r1: it is sent to r2 (a rolling update
            # loses no call this way).
            body, headers = _modern_call("whoami", {})
            async with httpx.AsyncClient(trust_env=False) as http:
                answer = (await http.post(gw.url("fixture"), json=body, headers=headers)).json()
            assert "error" not in answer and "r2" in answer["result"]["content"][0]["text"], answer


async def test_a_state_file_keeps_discovery_and_tool_approvals_across_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "gateway-state.json"
    with fixtures("r1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]}, state_file=str(state))
        gw = GatewayProc(cfg)
        try:
            gw.start()
            gw.stop()
            ups[0].kill()
            gw.start()  # no replica is up: discovery comes from the state file
            out = await arun_mcp1_client(gw.url("fixture", "sse"), [{"op": "list_tools"}], transport="sse")
            assert out["server_info"]["name"] == "fixture"
            assert "echo" in {t["name"] for t in out["results"][0]["tools"]}
            async with httpx.AsyncClient(trust_env=False) as http:
                approved = (await http.get(f"{gw.base}/admin/tools")).json()["fixture"]["approved"]
            assert "echo" in approved
        finally:
            gw.close()


async def test_a_replica_that_restarted_unnoticed_still_loses_its_sessions_loudly(transport: str) -> None:
    with fixtures("r1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]}, health={"interval_s": 600})
        with running_gateway(cfg) as gw:
            sid = _sid()
            url = gw.url("fixture", transport)
            async with connect(url, transport, headers={"x-session-id": sid}, mode="legacy") as client:
                assert (await call_text(client, "count")).endswith(":1")
                port = ups[0].port
                ups[0].kill()
                ups[0] = start_fixture("r1-restarted", port=port)  # back before any probe: state is gone
                with pytest.raises(MCPError) as lost:
                    await call_text(client, "count")
            # noticed either through a broken stream ("went away") or the replica's 404 ("no longer knows")
            assert lost.value.error.code == SESSION_LOST and sid in lost.value.error.message
            await eventually(lambda: _state(gw, ups[0].url) == "up", what="the restarted replica back in service")
            async with connect(url, transport, headers={"x-session-id": sid}, mode="legacy") as client:
                with pytest.raises(MCPError) as again:  # never a silent fresh state
                    await call_text(client, "count")
                assert again.value.error.code == SESSION_LOST
                with pytest.raises(MCPError):
                    await call_text(client, "cleanup_session")  # ... which drops the pin
                assert await call_text(client, "count") == f"r1-restarted:{sid}:1"


async def test_an_upstream_404_for_a_held_session_is_a_lost_session() -> None:
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    accept = {"accept": "application/json, text/event-stream"}
    with fixtures("r1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]}, health={"interval_s": 600})
        with running_gateway(cfg) as gw:
            async with httpx.AsyncClient(trust_env=False, headers=accept) as http:
                first = await http.post(
                    gw.url("fixture"), json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
                )
                headers = {"mcp-session-id": first.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
                port = ups[0].port
                ups[0].kill()
                ups[0] = start_fixture("r1-restarted", port=port)
                call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "count", "arguments": {}}}
                answer = (await http.post(gw.url("fixture"), json=call, headers=headers)).json()
            assert answer["error"]["code"] == SESSION_LOST and "no longer knows" in answer["error"]["message"]
