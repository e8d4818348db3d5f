"""The routes file: namespaces, their upstream replicas and policies, as frozen pydantic models.

Operators edit this YAML to swap a backend or add any MCP server; the gateway reloads it on SIGHUP
or when the file changes. `${VAR}` in values is replaced from the environment (keep tokens there).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toolkit.wire import MEMORY_HEADER, OWNER_HEADER, SESSION_HEADER

RESERVED = {"healthz", "readyz", "metrics", "admin"}
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?$")
_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


BROWSER_OPTIONS = (
    "x-browser-allowed-domains",
    "x-browser-external-access",
    "x-browser-context-size",
    "x-browser-user-location",
)
NAMESPACE_FORWARD: dict[str, tuple[str, ...]] = {
    "browser": BROWSER_OPTIONS,
    "python": (MEMORY_HEADER,),
    "container": (MEMORY_HEADER,),
}
"""Headers a namespace's server reads besides the common ones, forwarded unless its policy lists `forward` itself."""


class HeaderPolicy(_Frozen):
    """Which client headers reach the upstream; hop-by-hop headers never do."""

    forward: tuple[str, ...] = (SESSION_HEADER, OWNER_HEADER, "traceparent", "tracestate")
    rename: dict[str, str] = Field(default_factory=dict, description="client header -> upstream header")
    static: dict[str, str] = Field(default_factory=dict, description="headers added to every upstream request")

    @field_validator("forward")
    @classmethod
    def _lower(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.lower() for h in value)


class DnsDiscovery(_Frozen):
    """Replicas found by name: every address the name resolves to (A and AAAA) is one replica, at
    `http://ADDRESS:port/path`. A compose service scaled with `--scale`, `tasks.NAME` on a swarm (the plain
    service name there is one virtual IP) or a headless Kubernetes Service all answer this way."""

    dns: str = Field(description="the name to resolve")
    port: int = Field(ge=1, le=65535, description="the tool servers' port")
    path: str = Field("/mcp", description="their streamable-HTTP path")
    interval_s: float = Field(5.0, gt=0, description="resolve again this often")

    @field_validator("dns")
    @classmethod
    def _hostname(cls, value: str) -> str:
        if not _HOSTNAME.match(value):
            raise ValueError(f"discover.dns {value!r} is not a host name")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("discover.path must start with /")
        return value

    def url(self, address: str) -> str:
        """The replica URL of one resolved address (IPv6 in brackets)."""
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{self.port}{self.path}"


class NamespaceConfig(_Frozen):
    replicas: tuple[str, ...] = Field((), description="upstream streamable-HTTP endpoints, e.g. .../mcp")
    discover: DnsDiscovery | None = Field(None, description="find the replicas by DNS instead of listing them")

    @model_validator(mode="after")
    def _one_source(self) -> NamespaceConfig:
        if bool(self.replicas) == (self.discover is not None):
            raise ValueError("a namespace needs either replicas (a non-empty list) or discover, not both")
        return self

    @field_validator("replicas")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"replica {url!r} must be an http:// or https:// URL")
            if parts.username or parts.password:
                raise ValueError("put upstream credentials in headers.static, not in the replica URL (it is logged)")
        return value

    headers: HeaderPolicy = HeaderPolicy()
    timeout_s: float = Field(600.0, description="longest a forwarded call may take")
    connect_timeout_s: float = 2.0
    tool_pinning: Literal["refuse", "flag", "off"] = "refuse"
    restore_lost: bool = Field(
        False,
        description="the replicas share a snapshot store: a session (x-session-id) whose replica went away without "
        "draining (killed, a lost node) is placed on another, which restores its last snapshot or says its state was "
        "lost; false: its calls get a 'session ... was lost' error",
    )


class HealthConfig(_Frozen):
    interval_s: float = 5.0
    timeout_s: float = 3.0
    failures_to_open: int = Field(2, description="consecutive failures that open a replica's circuit")
    open_s: float = Field(5.0, description="how long an open circuit keeps a replica out before a re-probe")


class SecurityConfig(_Frozen):
    tokens: tuple[str, ...] = Field((), description="client bearer tokens; empty = no client auth")
    admin_tokens: tuple[str, ...] = Field((), description="tokens for /admin (tool approvals)")
    accepted_host_headers: tuple[str, ...] = Field(
        tuple(_LOOPBACK_HOSTS), description="Host headers accepted (DNS-rebinding guard); [] = any"
    )
    allowed_origins: tuple[str, ...] = Field((), description="Origins accepted besides the accepted hosts'")
    max_body_bytes: int = 4 * 1024 * 1024
    rate_per_s: float = Field(0.0, description="requests per second per client; 0 = unlimited")
    rate_burst: int = 100


class SessionConfig(_Frozen):
    idle_s: float = Field(
        1500.0,
        description="drop session pins idle this long; idle order: above the orchestrator's conversation idle"
        " (1200), below the tool servers' session TTL (1800)",
    )
    reap_interval_s: float = 30.0


class PoolConfig(_Frozen):
    """The upstream connection pool (read at start-up)."""

    idle_s: float = Field(
        4.0,
        gt=0,
        description="a pooled upstream connection idle this long is closed, not reused; keep it below the"
        " upstreams' keep-alive timeout (uvicorn's: 5 s), so the gateway never writes on one they are closing",
    )
    max_idle: int = Field(64, ge=0, description="idle connections kept per upstream")


class LegacySseConfig(_Frozen):
    """Back-pressure on a legacy SSE connection: what it may hold for a client that does not read its stream."""

    max_pending: int = Field(
        64, ge=1, description="messages a connection holds, forwarded or waiting to be written; a POST past it: 429"
    )
    max_queued_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1,
        description="bytes of answers waiting to be written to its stream; past it, a POST gets 429 and the"
        " upstream's further answers wait (they are read no faster than the client reads)",
    )


class GatewayConfig(_Frozen):
    namespaces: dict[str, NamespaceConfig] = Field(default_factory=dict)
    health: HealthConfig = HealthConfig()
    security: SecurityConfig = SecurityConfig()
    sessions: SessionConfig = SessionConfig()
    pool: PoolConfig = PoolConfig()
    legacy_sse: LegacySseConfig = LegacySseConfig()
    store: str = Field("memory", description="'memory' or a redis:// URL for a pin table shared by replicas")
    state_file: str | None = Field(
        None,
        description="with the memory store: a JSON file keeping approved tool hashes and last known discovery "
        "answers across restarts (Redis keeps them itself)",
    )

    @field_validator("namespaces")
    @classmethod
    def _names(cls, value: dict[str, NamespaceConfig]) -> dict[str, NamespaceConfig]:
        for name in value:
            if not _NAMESPACE.match(name) or name in RESERVED:
                raise ValueError(f"namespace {name!r} must match {_NAMESPACE.pattern} and not be one of {RESERVED}")
        for name, ns in value.items():
            extra = NAMESPACE_FORWARD.get(name)
            if extra and "forward" not in ns.headers.model_fields_set:
                headers = ns.headers.model_copy(update={"forward": ns.headers.forward + extra})
                value[name] = ns.model_copy(update={"headers": headers})
        return value


LOCAL_FLEET = {"browser": 8801, "python": 8802, "container": 8803}
"""The tool servers' default ports (DESIGN.md's port table): the routes of a fleet started by hand."""


def local_fleet() -> GatewayConfig:
    """The routes used when no routes file is given: each built-in tool on this machine, at its default port."""
    return GatewayConfig(
        namespaces={ns: NamespaceConfig(replicas=(f"http://127.0.0.1:{port}/mcp",)) for ns, port in LOCAL_FLEET.items()}
    )


def _expand(node: object) -> object:
    if isinstance(node, str):
        return os.path.expandvars(node)
    if isinstance(node, list):
        return [_expand(v) for v in node]
    if isinstance(node, dict):
        return {k: _expand(v) for k, v in node.items()}
    return node


def parse_config(text: str) -> GatewayConfig:
    return GatewayConfig.model_validate(_expand(yaml.safe_load(text) or {}))


def load_config(path: Path) -> GatewayConfig:
    return parse_config(path.read_text())
