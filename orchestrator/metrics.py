"""Prometheus metrics of the orchestrator: HTTP latency per route, responses, tokens, tool calls, workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.kinds import BUILTIN_NAMESPACES
from orchestrator.worker.client import WorkerPool

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class OrchestratorMetrics:
    def __init__(self, pool: WorkerPool | None, running: Callable[[], int]) -> None:
        self.registry = r = CollectorRegistry()
        self.latency = Histogram(
            "toolfleet_orchestrator_request_seconds",
            "HTTP request time by route template (streams: until the last event)",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.responses = Counter(
            "toolfleet_orchestrator_responses", "Responses by final status", ["status"], registry=r
        )
        Gauge("toolfleet_orchestrator_responses_in_flight", "Responses running", registry=r).set_function(running)
        self.tokens = Counter(
            "toolfleet_orchestrator_tokens",
            "Tokens by kind: input, output, cached (input), reasoning and tool_output (of output)",
            ["kind"],
            registry=r,
        )
        self.tool_calls = Counter(
            "toolfleet_orchestrator_tool_calls",
            "Tool calls by namespace (browser, python, container; mcp = any other server) and "
            "outcome (ok, tool_error, timeout, unavailable, rejected, error)",
            ["namespace", "outcome"],
            registry=r,
        )
        self.per_key = Counter(
            "toolfleet_orchestrator_key_usage",
            "Usage per API key id, counted by this replica (requests, responses, tokens_in, tokens_out, tool_calls,"
            " limit:rate, limit:running, limit:sockets); the key ids are the configured keys' (and anonymous)",
            ["key", "counter"],
            registry=r,
        )
        if pool is not None:
            r.register(_WorkerCollector(pool))

    def count_key(self, key: str, counter: str, n: int) -> None:
        self.per_key.labels(key, counter).inc(n)

    def settled(self, status: str, usage: dict[str, Any] | None, tool_calls: list[tuple[str, str]]) -> None:
        """One finished response: its status, its token usage and the outcome of each tool call it made."""
        self.responses.labels(status).inc()
        if usage:
            self.tokens.labels("input").inc(usage.get("input_tokens") or 0)
            self.tokens.labels("output").inc(usage.get("output_tokens") or 0)
            self.tokens.labels("cached").inc((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
            details = usage.get("output_tokens_details") or {}
            self.tokens.labels("reasoning").inc(details.get("reasoning_tokens") or 0)
            self.tokens.labels("tool_output").inc(details.get("tool_output_tokens") or 0)
        for namespace, outcome in tool_calls:
            label = namespace if namespace in BUILTIN_NAMESPACES or namespace == "unknown" else "mcp"
            self.tool_calls.labels(label, outcome).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


_BY_ERROR = {
    "check_failures": "Failed health checks, by error class (one alone does not take a worker out)",
    "downs": "Times a worker was taken out, by the error class that did it",
    "reconnects": "Errors on a pooled connection, by class, retried once on a new connection",
}
"""The pool's per-worker counters by error class, each a `_Worker` attribute of the same name."""


class _WorkerCollector(Collector):
    """Worker health, outstanding requests and failures, read from the pool at scrape time."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "toolfleet_orchestrator_worker_healthy", "1 when the worker takes traffic", labels=["worker"]
        )
        outstanding = GaugeMetricFamily(
            "toolfleet_orchestrator_worker_outstanding", "Requests in flight", labels=["worker"]
        )
        failures = CounterMetricFamily(
            "toolfleet_orchestrator_worker_failures",
            "Failed generations (before the first token: retried; after: 502)",
            labels=["worker", "stage"],
        )
        families = {
            key: CounterMetricFamily(f"toolfleet_orchestrator_worker_{key}", text, labels=["worker", "error"])
            for key, text in _BY_ERROR.items()
        }
        for w in self.pool.workers:
            healthy.add_metric([w.url], 1.0 if w.healthy else 0.0)
            outstanding.add_metric([w.url], w.outstanding)
            failures.add_metric([w.url, "before_first_token"], w.failures_before)
            failures.add_metric([w.url, "mid_stream"], w.failures_mid)
            for key, family in families.items():
                for error, n in getattr(w, key).items():
                    family.add_metric([w.url, error], n)
        yield from (healthy, outstanding, failures, *families.values(), *self._affinity())

    def _affinity(self) -> Iterator[Metric]:
        """Affinity outcomes per worker, and the worker's own prefix-cache counters (scraped by the health
        check from the first read of these metrics on)."""
        self.pool.scrape_cache = True
        affinity = CounterMetricFamily(
            "toolfleet_orchestrator_worker_affinity",
            "Requests by affinity outcome: hit (sent to its pinned worker), miss (no pin: the least loaded), spill"
            " (its pinned worker was saturated: counted on that worker)",
            labels=["worker", "outcome"],
        )
        cache = CounterMetricFamily(
            "toolfleet_orchestrator_worker_prefix_cache",
            "The worker's own prefix-cache counters in tokens (vLLM's vllm:prefix_cache_hits / _queries)",
            labels=["worker", "kind"],
        )
        for w in self.pool.workers:
            for outcome in ("hit", "miss", "spill"):
                affinity.add_metric([w.url, outcome], w.affinity[outcome])
            for kind in ("hits", "queries"):
                if kind in w.prefix_cache:
                    cache.add_metric([w.url, kind], w.prefix_cache[kind])
        yield from (affinity, cache)


class LatencyMiddleware:
    """Pure ASGI: observes each HTTP request under its route template (`/v1/responses/{rid}`), not its path."""

    def __init__(self, app: ASGIApp, metrics: OrchestratorMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.latency.labels(route, scope["method"], str(status)).observe(time.perf_counter() - start)
