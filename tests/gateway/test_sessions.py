"""Sticky sessions, balancing, cleanup_session and idle cleanup, with real replicas behind a real gateway."""

from __future__ import annotations

import time
import uuid

import anyio

from tests.support.gateway import (
    GatewayProc,
    Upstream,
    call_text,
    connect,
    fixtures,
    gateway_config,
    metric,
    running_gateway,
)


def _sid() -> str:
    return f"resp_{uuid.uuid4().hex[:12]}"


async def test_a_session_id_stays_on_its_replica_across_mcp_sessions(gateway: GatewayProc, transport: str) -> None:
    sid = _sid()
    seen = []
    for _ in range(3):
        async with connect(gateway.url("fixture", transport), transport, headers={"x-session-id": sid}) as client:
            seen.append(await call_text(client, "count"))
    replica = seen[0].split(":")[0]
    assert seen == [f"{replica}:{sid}:1", f"{replica}:{sid}:2", f"{replica}:{sid}:3"]


async def test_new_sessions_go_to_the_replica_with_fewest_sessions(gateway: GatewayProc, transport: str) -> None:
    replicas = []
    sids = [_sid() for _ in range(4)]
    for sid in sids:
        async with connect(gateway.url("fixture", transport), transport, headers={"x-session-id": sid}) as client:
            replicas.append((await call_text(client, "count")).split(":")[0])
    assert sorted(set(replicas)) == ["r1", "r2"]
    for sid in sids:
        async with connect(gateway.url("fixture", transport), transport, headers={"x-session-id": sid}) as client:
            await call_text(client, "cleanup_session")


async def test_without_a_session_id_the_mcp_session_is_the_session(gateway: GatewayProc, transport: str) -> None:
    async with connect(gateway.url("fixture", transport), transport, mode="legacy") as client:
        first = await call_text(client, "count")
        second = await call_text(client, "count")
        await call_text(client, "cleanup_session")
    replica, key, n = first.split(":")
    assert second == f"{replica}:{key}:2" and n == "1"


async def test_cleanup_session_reaches_the_sessions_replica_and_drops_the_pin(
    gateway: GatewayProc, replicas: list[Upstream], transport: str
) -> None:
    sid = _sid()
    url = gateway.url("fixture", transport)
    async with connect(url, transport, headers={"x-session-id": sid}) as client:
        replica = (await call_text(client, "count")).split(":")[0]
        pinned = metric(
            gateway.base,
            "toolfleet_gateway_sessions_active",
            namespace="fixture",
            replica=next(u.url for u in replicas if u.replica == replica),
        )
        assert pinned >= 1
        assert await call_text(client, "cleanup_session") == f"session {sid} cleaned up"
    async with connect(replicas[0].url if replica == "r1" else replicas[1].url, "streamable-http") as direct:
        assert sid in await call_text(direct, "cleaned_sessions")
    after = metric(
        gateway.base,
        "toolfleet_gateway_sessions_active",
        namespace="fixture",
        replica=next(u.url for u in replicas if u.replica == replica),
    )
    assert after == pinned - 1
    async with connect(url, transport, headers={"x-session-id": sid}) as client:  # a fresh start after cleanup
        assert (await call_text(client, "count")).endswith(f"{sid}:1")
        await call_text(client, "cleanup_session")


async def test_a_client_that_leaves_without_cleanup_is_cleaned_after_the_idle_time() -> None:
    with fixtures("r1") as ups:
        cfg = gateway_config({"fixture": [ups[0].url]}, sessions={"idle_s": 1.0, "reap_interval_s": 0.3})
        with running_gateway(cfg) as gw:
            sid = _sid()
            async with connect(gw.url("fixture"), "streamable-http", headers={"x-session-id": sid}) as client:
                await call_text(client, "count")
            deadline = time.monotonic() + 10
            async with connect(ups[0].url, "streamable-http") as direct:
                while sid not in await call_text(direct, "cleaned_sessions"):
                    assert time.monotonic() < deadline, "idle session was never cleaned up"
                    await anyio.sleep(0.2)
            assert metric(gw.base, "toolfleet_gateway_sessions_active", namespace="fixture", replica=ups[0].url) == 0


async def test_a_client_ending_its_mcp_session_cleans_it_up_on_the_replica(
    gateway: GatewayProc, replicas: list[Upstream], transport: str
) -> None:
    async with connect(gateway.url("fixture", transport), transport, mode="legacy") as client:
        replica, key, _ = (await call_text(client, "count")).split(":")
    # streamable HTTP: the client's DELETE; legacy SSE: the closed event stream
    up = next(u for u in replicas if u.replica == replica)
    async with connect(up.url, "streamable-http") as direct:
        for _ in range(50):
            if key in (await call_text(direct, "cleaned_sessions")).split(","):
                break
            await anyio.sleep(0.1)
        else:
            raise AssertionError(f"session {key} was never cleaned up on {replica}")
