"""Prometheus metrics of one tool server, in a registry of its own so several servers can share a process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ToolMetrics:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.registry = CollectorRegistry()
        self.sessions = Gauge(
            "toolfleet_tool_sessions_active", "Sessions held", ["namespace"], registry=self.registry
        ).labels(namespace)
        self.calls = Counter(
            "toolfleet_tool_calls",
            "Tool calls by outcome (ok, tool_error, error)",
            ["namespace", "tool", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "toolfleet_tool_call_seconds",
            "Tool call latency",
            ["namespace", "tool"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, tool: str, outcome: str, seconds: float) -> None:
        self.calls.labels(self.namespace, tool, outcome).inc()
        self.latency.labels(self.namespace, tool).observe(seconds)

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4")
