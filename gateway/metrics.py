"""Prometheus metrics of the gateway, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from toolkit.metrics import LATENCY_BUCKETS

KNOWN_METHODS = frozenset(
    {
        "initialize",
        "server/discover",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
    }
)


def method_label(method: str | None) -> str:
    if method is None:
        return "response"
    if method.startswith("notifications/"):
        return "notification"
    return method if method in KNOWN_METHODS else "other"


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "toolfleet_gateway_requests",
            "JSON-RPC messages from clients by outcome (ok, error)",
            ["namespace", "method", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "toolfleet_gateway_request_seconds",
            "Time to the upstream's answer (headers) for a client message",
            ["namespace", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "toolfleet_gateway_errors",
            "Errors answered by the gateway by JSON-RPC code",
            ["namespace", "code"],
            registry=self.registry,
        )
        self.sessions = self._per_replica("toolfleet_gateway_sessions_active", "Pinned sessions per replica")
        self.healthy = self._per_replica("toolfleet_gateway_upstream_healthy", "1 when the replica is taking traffic")
        self.room = self._per_replica(
            "toolfleet_gateway_replica_room", "Sessions the replica last said it can still open (-1: not told)"
        )
        self.draining = self._per_replica(
            "toolfleet_gateway_replica_draining",
            "1 while the replica drains (told to stop, or gone from discovery): no new session goes there",
        )
        self.tool_changes = Counter(
            "toolfleet_gateway_tool_definition_changes",
            "Tool definitions that changed since approval",
            ["namespace", "tool"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}

    def _per_replica(self, name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, ["namespace", "replica"], registry=self.registry)

    def observe(self, namespace: str, method: str | None, outcome: str, seconds: float) -> None:
        """One client message. `labels` is most of a sample's cost, so each label set's children are kept."""
        label = method_label(method)
        children = self._children.get((namespace, label, outcome))
        if children is None:
            children = self.requests.labels(namespace, label, outcome), self.latency.labels(namespace, label)
            self._children[namespace, label, outcome] = children
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
