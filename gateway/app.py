"""The gateway's ASGI app: routes, the security middleware, health, metrics, admin and the lifespan."""

from __future__ import annotations

import json

import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import sessionlist
from gateway.asgi import read_body, send_bytes, send_error, send_json
from gateway.errors import GatewayError, UnknownNamespace
from gateway.legacy import handle_messages, handle_sse
from gateway.lifecycle import running
from gateway.paths import CanonicalPath, segments
from gateway.security import SecurityMiddleware
from gateway.service import Gateway
from gateway.streamable import handle_mcp
from gateway.upstream import Replica

log = structlog.get_logger(__name__)

TRANSPORTS = {"mcp": handle_mcp, "sse": handle_sse, "messages": handle_messages}
DECISIONS = {"approve": "approved", "reject": "rejected"}  # POST /admin/tools/<ns>/<decision> -> its answer's key


def build_app(gw: Gateway) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(gw, receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]  # canonical (`paths.CanonicalPath`), as the security check read it
        parts = segments(path)
        if len(parts) == 2 and (handler := TRANSPORTS.get(parts[1])) is not None:
            ns = gw.namespaces.get(parts[0])
            if ns is None:
                await send_error(send, None, UnknownNamespace(f"unknown namespace {parts[0]!r}"))
                return
            await handler(gw, ns, scope, receive, send)
        elif path == "/healthz":  # alive: every background loop still runs
            await send_json(send, *gw.loops.health())
        elif path == "/readyz":
            await _readyz(gw, send)
        elif path == "/metrics":
            await _metrics(gw, send)
        elif parts[0] == "admin":
            await _admin(gw, scope, receive, parts, send)
        else:
            await send_error(send, None, UnknownNamespace(f"no route for {path!r}; use /<namespace>/mcp or /sse"))

    return CanonicalPath(SecurityMiddleware(app, gw))


async def _lifespan(gw: Gateway, receive: Receive, send: Send) -> None:
    await receive()
    try:
        async with running(gw):
            await send({"type": "lifespan.startup.complete"})
            await receive()
    except Exception as exc:
        log.exception("gateway.lifespan_failed")
        await send({"type": "lifespan.startup.failed", "message": str(exc)})
        return
    await send({"type": "lifespan.shutdown.complete"})


def _state(replica: Replica) -> str:
    if not replica.available:
        return "down"
    return "draining" if replica.draining else "up"


async def _status(gw: Gateway) -> dict[str, object]:
    """Per namespace: each replica's state and the sessions pinned to it (read by the operator console)."""
    counts = {name: await gw.store.counts(name) for name in gw.namespaces}
    return {
        name: {
            "replicas": {r.url: _state(r) for r in ns.replicas.values()},
            "sessions": {url: counts[name].get(url, 0) for url in ns.replicas},
            **({"discover": f"{ns.cfg.discover.dns}:{ns.cfg.discover.port}"} if ns.cfg.discover else {}),
            "discovery_cached": ns.tools is not None,
            "pending_tools": sorted(ns.guard.pending),
            "rejected_tools": sorted(ns.guard.held),
        }
        for name, ns in gw.namespaces.items()
    }


def _ready(gw: Gateway) -> bool:
    """Ready once probed, when every namespace has a healthy replica or a last known tool list."""
    return gw.started and all(ns.healthy() or ns.tools is not None for ns in gw.namespaces.values())


async def _readyz(gw: Gateway, send: Send) -> None:
    """Unauthenticated, so it says ready or not and how many replicas are up, never which: replica URLs are the
    fleet's topology, shown to operators only (`GET /admin/status`)."""
    ready = _ready(gw)
    replicas = [r for ns in gw.namespaces.values() for r in ns.replicas.values()]
    counts = {"replicas": len(replicas), "replicas_up": sum(r.available for r in replicas)}
    await send_json(send, 200 if ready else 503, {"ready": ready, **counts})


async def _metrics(gw: Gateway, send: Send) -> None:
    for ns in gw.namespaces.values():
        counts = await gw.store.counts(ns.name)
        for url, replica in ns.replicas.items():
            gw.metrics.sessions.labels(ns.name, url).set(counts.get(url, 0))
            gw.metrics.room.labels(ns.name, url).set(-1 if replica.room is None else replica.room)
            gw.metrics.draining.labels(ns.name, url).set(1 if replica.draining else 0)
    await send_bytes(send, 200, gw.metrics.render(), b"text/plain; version=0.0.4")


async def _admin(gw: Gateway, scope: Scope, receive: Receive, parts: list[str], send: Send) -> None:
    """`GET /admin/tools`: pending tool changes (with the approved and pending texts); `POST
    /admin/tools/<ns>/approve` or `reject`: decide them; `GET /admin/status`: readiness with every replica's URL
    and state; `GET /admin/sessions` and `POST /admin/sessions/end`: every replica's sandbox sessions, and ending
    one (`sessionlist`)."""
    try:
        if parts == ["admin", "sessions"] and scope["method"] == "GET":
            await send_json(send, 200, {"namespaces": await sessionlist.listing(gw)})
        elif parts == ["admin", "sessions", "end"] and scope["method"] == "POST":
            asked = await read_body(scope, receive, gw.cfg.security.max_body_bytes)
            await send_json(send, 200, await sessionlist.end(gw, asked))
        elif parts == ["admin", "status"] and scope["method"] == "GET":
            await send_json(send, 200, {"ready": _ready(gw), "namespaces": await _status(gw)})
        elif parts == ["admin", "tools"] and scope["method"] == "GET":
            await send_json(send, 200, {n: ns.guard.report() for n, ns in gw.namespaces.items()})
        elif len(parts) == 4 and parts[1] == "tools" and parts[3] in DECISIONS and scope["method"] == "POST":
            ns = gw.namespaces.get(parts[2])
            if ns is None:
                raise UnknownNamespace(f"unknown namespace {parts[2]!r}")
            decided = await (ns.guard.approve() if parts[3] == "approve" else ns.guard.reject())
            await send_bytes(send, 200, json.dumps({DECISIONS[parts[3]]: decided}).encode())
        else:
            raise UnknownNamespace("unknown admin route")
    except GatewayError as exc:
        await send_error(send, None, exc)
