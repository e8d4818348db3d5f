"""Logs, metrics and health endpoints."""

from __future__ import annotations

import json
import time

import httpx

from tests.gateway.harness import (
    GatewayProc,
    Upstream,
    call_text,
    connect,
    free_port,
    gateway_config,
    metric,
    running_gateway,
)


async def test_each_request_is_one_json_log_event_and_counted_in_metrics(
    gateway: GatewayProc, replicas: list[Upstream]
) -> None:
    async with connect(
        gateway.url("fixture"), "streamable-http", headers={"x-session-id": "resp_observed", "x-request-id": "req-42"}
    ) as client:
        assert await call_text(client, "echo", {"text": "hi"}) == "hi"
        await call_text(client, "cleanup_session")
    events = [json.loads(line) for line in gateway.logs().splitlines() if line.startswith("{")]
    calls = [e for e in events if e.get("event") == "gateway.request" and e.get("session_id") == "resp_observed"]
    assert calls, "no gateway.request events"
    call = next(e for e in calls if e["method"] == "tools/call")
    assert call["namespace"] == "fixture" and call["outcome"] == "ok" and call["request_id"] == "req-42"
    assert call["replica"] in {u.url for u in replicas} and call["ms"] >= 0 and call["level"] == "info"
    assert (
        metric(gateway.base, "toolfleet_gateway_requests_total", namespace="fixture", method="tools/call", outcome="ok")
        >= 2
    )
    assert (
        metric(gateway.base, "toolfleet_gateway_request_seconds_count", namespace="fixture", method="tools/call") >= 2
    )
    for up in replicas:
        assert metric(gateway.base, "toolfleet_gateway_upstream_healthy", namespace="fixture", replica=up.url) == 1


def test_healthz_is_liveness_and_readyz_wants_a_replica_or_known_tools() -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    with running_gateway(gateway_config({"nowhere": [dead]}), ready=False) as gw:
        assert httpx.get(f"{gw.base}/healthz", trust_env=False).json() == {"status": "ok"}
        deadline = time.monotonic() + 10
        while (ready := httpx.get(f"{gw.base}/readyz", trust_env=False)).json()["namespaces"]["nowhere"]["replicas"][
            dead
        ] != "down":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert ready.status_code == 503 and not ready.json()["ready"]
