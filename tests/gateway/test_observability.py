"""Logs, metrics and health endpoints."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from tests.support.asgi import free_port
from tests.support.gateway import GatewayProc, Upstream, call_text, connect, gateway_config, metric, running_gateway


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_each_request_is_one_json_log_event_and_counted_in_metrics(
    gateway: GatewayProc, replicas: list[Upstream], transport: str
) -> None:
    def calls() -> tuple[float, float]:
        labels = {"namespace": "fixture", "method": "tools/call"}
        return (
            metric(gateway.base, "toolfleet_gateway_requests_total", outcome="ok", **labels),
            metric(gateway.base, "toolfleet_gateway_request_seconds_count", **labels),
        )

    before, sid = calls(), f"resp_observed_{uuid.uuid4().hex[:8]}"
    headers = {"x-session-id": sid, "x-request-id": "req-42"}
    async with connect(gateway.url("fixture", transport), transport, headers=headers) as client:
        assert await call_text(client, "echo", {"text": "hi"}) == "hi"
        await call_text(client, "cleanup_session")
    events = [json.loads(line) for line in gateway.logs().splitlines() if line.startswith("{")]
    mine = [e for e in events if e.get("event") == "gateway.request" and e.get("session_id") == sid]
    assert [e["method"] for e in mine if e["method"] == "tools/call"] == ["tools/call"] * 2, mine
    call = next(e for e in mine if e["method"] == "tools/call")
    assert call["namespace"] == "fixture" and call["outcome"] == "ok" and call["level"] == "info"
    assert call["replica"] in {u.url for u in replicas} and call["ms"] >= 0
    if transport == "streamable-http":  # each POST carries its request id; an SSE stream carries the one it opened with
        assert call["request_id"] == "req-42"
    assert [after - was for after, was in zip(calls(), before, strict=True)] == [2, 2]
    for up in replicas:
        assert metric(gateway.base, "toolfleet_gateway_upstream_healthy", namespace="fixture", replica=up.url) == 1


def test_healthz_is_liveness_and_readyz_wants_a_replica_or_known_tools() -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    with running_gateway(gateway_config({"nowhere": [dead]}), ready=False) as gw:
        assert httpx.get(f"{gw.base}/healthz", trust_env=False).json() == {"status": "ok"}
        deadline = time.monotonic() + 10
        status = f"{gw.base}/admin/status"  # from loopback: the admin, with no admin token configured
        while httpx.get(status, trust_env=False).json()["namespaces"]["nowhere"]["replicas"][dead] != "down":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ready = httpx.get(f"{gw.base}/readyz", trust_env=False)
        assert ready.status_code == 503 and ready.json() == {"ready": False, "replicas": 1, "replicas_up": 0}
