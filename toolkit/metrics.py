"""Prometheus metrics of one tool server, in a registry of its own so several servers can share a process."""

from __future__ import annotations

import functools
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


SANDBOX_STATES = ("starting", "warm", "held")
SNAPSHOT_BYTES_BUCKETS = tuple(float(4**n * 1024) for n in range(1, 12))
"""4 KiB to 4 GiB, by fours."""
SNAPSHOT_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Census(Protocol):
    """What a sandbox tool's runtime tells about its sandboxes (`toolkit.sandbox.runtime.ContainerRuntime`)."""

    def census(self) -> dict[str, int]: ...
    def memory_limit_bytes(self) -> int: ...
    def memory_used_bytes(self) -> int: ...


def _in_state(census: Census, state: str) -> int:
    """The gauge of one census state, read at each scrape."""
    return census.census()[state]


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

    def count_sandboxes(self, census: Census) -> None:
        """Gauges of the sandboxes and their memory, read from `census` at each scrape (so they never lag)."""
        sandboxes = Gauge(
            "toolfleet_tool_sandboxes",
            "Sandboxes by state: starting, warm (in the pool), held (bound to a session)",
            ["namespace", "state"],
            registry=self.registry,
        )
        for state in SANDBOX_STATES:
            sandboxes.labels(self.namespace, state).set_function(functools.partial(_in_state, census, state))
        limit = Gauge(
            "toolfleet_tool_sandbox_memory_limit_bytes",
            "Memory limits of the sandboxes, summed",
            ["namespace"],
            registry=self.registry,
        )
        limit.labels(self.namespace).set_function(census.memory_limit_bytes)
        used = Gauge(
            "toolfleet_tool_sandbox_memory_used_bytes",
            "Memory the sandboxes use, summed, as the engine reported it at the last sample (--memory-sample-s)",
            ["namespace"],
            registry=self.registry,
        )
        used.labels(self.namespace).set_function(census.memory_used_bytes)

    def count_snapshots(self) -> SnapshotMetrics:
        """The snapshot metrics, for a server that keeps snapshots (`toolkit.snapshots.keeper`)."""
        return SnapshotMetrics(self.namespace, self.registry)

    def observe(self, tool: str, outcome: str, seconds: float) -> None:
        self.calls.labels(self.namespace, tool, outcome).inc()
        self.latency.labels(self.namespace, tool).observe(seconds)

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4")


class SnapshotMetrics:
    """Snapshots taken and restored (by what took them: evict, reap, drain, background), their size and
    latency, and failures by reason: the `SnapshotObserver` of a tool server's keeper."""

    def __init__(self, namespace: str, registry: CollectorRegistry) -> None:
        self.namespace = namespace
        self.count = Counter(
            "toolfleet_tool_snapshots",
            "Snapshots taken (op=save) and restored (op=restore), by what took them",
            ["namespace", "op", "trigger"],
            registry=registry,
        )
        self.size = Histogram(
            "toolfleet_tool_snapshot_bytes",
            "Size of the snapshots taken and restored",
            ["namespace", "op"],
            buckets=SNAPSHOT_BYTES_BUCKETS,
            registry=registry,
        )
        self.latency = Histogram(
            "toolfleet_tool_snapshot_seconds",
            "Time to take a snapshot (sandbox and store) or restore one (store and sandbox)",
            ["namespace", "op"],
            buckets=SNAPSHOT_SECONDS_BUCKETS,
            registry=registry,
        )
        self.failures = Counter(
            "toolfleet_tool_snapshot_failures",
            "Snapshots not taken or not restored, by reason: oversized, a refused one (corrupt, truncated, "
            "unsigned, foreign, expired), sandbox (it could not make or load one), store (unreachable or full)",
            ["namespace", "op", "reason"],
            registry=registry,
        )

    def _done(self, op: str, trigger: str, size: int, seconds: float) -> None:
        self.count.labels(self.namespace, op, trigger or "unknown").inc()
        self.size.labels(self.namespace, op).observe(size)
        self.latency.labels(self.namespace, op).observe(seconds)

    def taken(self, trigger: str, size: int, seconds: float) -> None:
        self._done("save", trigger, size, seconds)

    def restored(self, trigger: str, size: int, seconds: float) -> None:
        self._done("restore", trigger, size, seconds)

    def failed(self, op: str, reason: str) -> None:
        self.failures.labels(self.namespace, op, reason).inc()
