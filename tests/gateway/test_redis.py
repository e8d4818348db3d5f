"""A pin table in Redis (a real redis-server started by the test) shared by gateway replicas and restarts."""

from __future__ import annotations

import contextlib
import shutil
import uuid

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.asgi import free_port
from tests.support.gateway import GatewayProc, call_text, connect, fixtures, gateway_config
from tests.support.redis import redis_server

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server (apt install redis-server)"
)
UNAVAILABLE = -32003


async def test_sessions_survive_a_gateway_restart_and_are_shared_by_gateway_replicas(transport: str) -> None:
    with redis_server() as redis_url, fixtures("r1", "r2") as ups:
        cfg = gateway_config({"fixture": [u.url for u in ups]}, store=redis_url)
        first = GatewayProc(cfg)
        second = GatewayProc(cfg)
        try:
            first.start()
            sid = f"resp_{uuid.uuid4().hex[:10]}"
            headers = {"x-session-id": sid}
            async with connect(first.url("fixture", transport), transport, headers=headers) as client:
                replica = (await call_text(client, "count")).split(":")[0]
            # a second gateway replica sees the same pin
            second.start()
            async with connect(second.url("fixture", transport), transport, headers=headers) as client:
                assert await call_text(client, "count") == f"{replica}:{sid}:2"
            # the first gateway restarts on the same port: the pin is still there
            first.stop()
            first.start()
            async with connect(first.url("fixture", transport), transport, headers=headers) as client:
                assert await call_text(client, "count") == f"{replica}:{sid}:3"
                await call_text(client, "cleanup_session")
        finally:
            first.close()
            second.close()


async def test_an_mcp_session_continues_through_a_gateway_restart() -> None:
    with redis_server() as redis_url, fixtures("r1", "r2") as ups:
        gw = GatewayProc(gateway_config({"fixture": [u.url for u in ups]}, store=redis_url))
        try:
            gw.start()
            async with connect(gw.url("fixture"), "streamable-http", mode="legacy") as client:
                first = await call_text(client, "count")
                gw.stop()
                gw.start()
                second = await call_text(client, "count")
                await call_text(client, "cleanup_session")
            replica, key, _ = first.split(":")
            assert second == f"{replica}:{key}:2"
        finally:
            gw.close()


async def test_a_redis_outage_answers_calls_with_a_clear_unavailable_error_and_serving_resumes_after_it() -> None:
    port = free_port()
    with fixtures("r1") as ups, contextlib.ExitStack() as outage:
        redis_url = outage.enter_context(redis_server(port))
        gw = GatewayProc(gateway_config({"fixture": [ups[0].url]}, store=redis_url))
        try:
            gw.start()
            url, headers = gw.url("fixture"), {"x-session-id": f"resp_{uuid.uuid4().hex[:10]}"}
            async with connect(url, "streamable-http", headers=headers) as client:
                assert (await call_text(client, "count")).endswith(":1")
                outage.close()  # Redis goes away (a restart, a network cut)
                with pytest.raises(MCPError) as down:
                    await call_text(client, "count")
            assert down.value.error.code == UNAVAILABLE
            assert down.value.error.message.startswith("shared store (Redis) unavailable: ")
            with redis_server(port):  # back, empty (no persistence): the session's pin is gone with it
                async with connect(url, "streamable-http", headers={"x-session-id": "after"}) as client:
                    assert (await call_text(client, "count")).endswith(":after:1")
                    await call_text(client, "cleanup_session")
            assert "gateway.unhandled" not in gw.logs()
        finally:
            gw.close()
