"""The gateway's state and its one forwarding step, shared by both client transports."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup
from opentelemetry.trace import SpanKind

from gateway.config import GatewayConfig
from gateway.envelope import NEW_HANDLE, session_handle
from gateway.errors import SessionLost, ToolNotApproved, Unanswered, Unavailable, Unreached
from gateway.headers import TRACE_CONTEXT
from gateway.keys import SessionKey
from gateway.messages import SAFE_METHODS, Rewriter, protocol_version, tool_name
from gateway.metrics import GatewayMetrics
from gateway.probe import PROBE_VERSION, ProbeSession
from gateway.routing import DRAINED, LOST, Degraded, Namespace, Router, Target
from gateway.store import SessionRecord, Store, open_store
from gateway.upstream import Replica, make_client, open_stream
from toolkit.loops import Loops
from toolkit.mcpwire.http import Response, Timeouts
from toolkit.tracing import annotate, current_request_id, extract, inject, span
from toolkit.wire import REQUEST_ID_HEADER, RESET_HEADER

log = structlog.get_logger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""(name, port) -> every address of the name; raises OSError when it cannot tell."""

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


class Gateway:
    """The fleet as the gateway sees it, and the forwarding step. It imports none of the jobs that keep it
    current (health, discovery): `lifecycle` builds one and runs them."""

    def __init__(self, cfg: GatewayConfig, *, resolver: Resolver, store: Store | None = None) -> None:
        self.cfg = cfg
        self.store = store or open_store(cfg.store, cfg.state_file)
        self.resolver = resolver
        """How discovered namespaces resolve their name (tests inject their own)."""
        self.router = Router(self.store)
        self.metrics = GatewayMetrics()
        self.client = make_client(cfg.pool)
        self.started = False
        self.tasks: TaskGroup | None = None
        """The running gateway's task group (set by `lifecycle.running`), for work a callback starts."""
        self.legacy: dict[str, Any] = {}
        """Open legacy SSE connections by gateway session id (they live and die with this process)."""
        self.background: dict[str, Callable[[], Awaitable[None]]] = {}
        """Extra long-running jobs for `running`, by name (the entrypoint adds the config watcher)."""
        self.loops = Loops()
        """The long-running jobs' watch: one that ends makes /healthz fail."""
        self.reviving: dict[str, anyio.Event] = {}
        """Namespaces whose down replicas are being probed for a waiting call, and the round's end."""
        self.apply(cfg)

    @property
    def namespaces(self) -> dict[str, Namespace]:
        return self.router.namespaces

    def apply(self, cfg: GatewayConfig) -> None:
        """Swap in a new routes file. Calls in flight keep the objects they hold, so none is dropped."""
        old = self.router.namespaces
        new: dict[str, Namespace] = {}
        for name, ns_cfg in cfg.namespaces.items():
            prev = old.get(name)
            if prev is not None and prev.cfg == ns_cfg and self.cfg.health == cfg.health:
                new[name] = prev
                continue
            ns = Namespace(name, ns_cfg, cfg, self.store)
            if prev is not None:  # keep what was learned about replicas that stay
                same_name = ns_cfg.discover is not None and ns_cfg.discover == prev.cfg.discover
                ns.replicas.update({u: r for u, r in prev.replicas.items() if u in ns.replicas or same_name})
                if same_name:
                    ns.resolved_at = prev.resolved_at
                ns.initialize_result, ns.tools = prev.initialize_result, prev.tools
                ns.guard.take_over(prev.guard)
            ns.guard.on_flag = functools.partial(self._flag, name)
            for replica in ns.replicas.values():
                self.watch(replica)
            new[name] = ns
        self.cfg = cfg
        self.router.namespaces = new
        log.info("config.applied", namespaces=sorted(new), replicas=sum(len(n.replicas) for n in new.values()))

    def _flag(self, namespace: str, tool: str) -> None:
        self.metrics.tool_changes.labels(namespace, tool).inc()

    def watch(self, replica: Replica) -> None:
        """Follow a replica's health: its sessions are lost when it goes down; the gauge tracks it."""

        def down(r: Replica) -> None:
            if self.tasks is None:
                return
            if r.vanished:  # it left discovery and has now stopped: it goes for good
                self.tasks.start_soon(self._vanish, r)
            else:
                self.tasks.start_soon(self.router.replica_down, r)

        def state(r: Replica) -> None:
            self.metrics.healthy.labels(r.namespace, r.url).set(1 if r.healthy else 0)

        replica.on_down, replica.on_state = down, state
        state(replica)

    async def _vanish(self, replica: Replica) -> None:
        ns = self.namespaces.get(replica.namespace)
        if ns is not None and ns.replicas.get(replica.url) is replica:
            del ns.replicas[replica.url]
        await self.forget(replica)

    async def forget(self, replica: Replica) -> None:
        """A replica left its namespace (its address vanished from DNS): its sessions are lost."""
        await self.router.replica_down(replica)
        for gauge in (self.metrics.healthy, self.metrics.sessions, self.metrics.room, self.metrics.draining):
            with contextlib.suppress(KeyError):
                gauge.remove(replica.namespace, replica.url)

    def check_call(self, ns: Namespace, msg: dict[str, Any]) -> None:
        name = tool_name(msg)
        if name is not None and ns.guard.refused(name):
            raise ToolNotApproved(
                f"tool {name!r} of {ns.name!r} changed since it was approved; an operator must approve it",
                data={"namespace": ns.name, "tool": name},
            )

    async def forward(
        self, target: Target, msg: dict[str, Any], body: bytes, client_headers: Iterable[tuple[bytes, bytes]]
    ) -> tuple[Target, Response]:
        """POST one message to the target's replica; a safe method on a fresh pin is retried on another.
        One span per message, child of the client's trace context, which goes upstream as this span's."""
        ns = target.ns
        headers = ns.rules.apply(client_headers)
        if (rid := current_request_id()) is not None:
            headers[REQUEST_ID_HEADER] = rid  # the tool server logs this request under the same id
        with traced_forward(target, msg, headers):
            return await self._post(target, msg, body, headers)

    async def _post(
        self, target: Target, msg: dict[str, Any], body: bytes, headers: dict[str, str]
    ) -> tuple[Target, Response]:
        ns = target.ns
        timeout = Timeouts(connect=ns.cfg.connect_timeout_s, read=ns.cfg.timeout_s)
        for attempt in range(2):
            if target.moved is not None:  # the new replica restores the session, or tells its next call why not
                headers[RESET_HEADER] = target.moved
            try:
                if target.reopen:
                    await self._reopen(target, headers)
                if target.upstream_sid:
                    headers["mcp-session-id"] = target.upstream_sid
                return target, await open_stream(
                    self.client, target.replica, "POST", headers, body, http_timeout=timeout
                )
            except Unavailable as exc:
                retry, moving = self._may_move(target, msg, exc)
                if (target.fresh or moving) and attempt == 0 and retry and len(ns.replicas) > 1:
                    with contextlib.suppress(Unavailable):
                        target = await self.router.repick(target, target.replica, moved=moving or target.moved)
                        continue
                raise self.as_lost(target, exc) from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _may_move(target: Target, msg: dict[str, Any], exc: Unavailable) -> tuple[bool, str | None]:
        """Whether another replica may take a message its replica failed (retry), and whether its session moves
        there (why its replica went; None: it does not). A safe method may go anywhere, and so may any call that
        never reached the first replica (a replica draining or gone refuses the connection) or that a draining
        one dropped unanswered as it stopped (`Unanswered`). Its session moves when it is named by x-session-id
        and its replica drained, or by a (fleet-signed) handle, or by x-session-id with `restore_lost`, and its
        replica stopped: the new replica restores it or says it was reset, and a client's MCP session gets a new
        upstream session there. A retry's state means something to the replica that issued it alone, so that
        one is lost."""
        replica = target.replica
        stopped = isinstance(exc, Unreached) or (isinstance(exc, Unanswered) and replica.said_draining)
        retry = msg.get("method") in SAFE_METHODS or stopped
        key = target.key
        by_handle = key is not None and key.kind == "handle"
        restorable = by_handle or (key is not None and key.by_header and target.ns.cfg.restore_lost)
        movable = key is None or key.by_header or by_handle
        if not (retry and movable and (replica.said_draining or (restorable and stopped))):
            return retry, None
        return retry, DRAINED if replica.said_draining else LOST

    async def _reopen(self, target: Target, headers: dict[str, str]) -> None:
        """Open the upstream session of a client's MCP session that moved with its key to `target.replica`
        (its first replica drained): the client keeps its session, the new replica gets a new one."""
        assert target.sid is not None and target.key is not None
        version = headers.get("mcp-protocol-version", "")
        forwarded = {k: v for k, v in headers.items() if k != "mcp-session-id"}
        upstream = ProbeSession(self.client, target.replica, forwarded, target.ns.cfg.timeout_s)
        await upstream.open(version if version in HANDSHAKE_VERSIONS else PROBE_VERSION)
        record = SessionRecord(target.ns.name, target.key, target.replica.url, upstream.sid)
        await self.store.put_session(target.sid, record)
        target.upstream_sid, target.reopen = upstream.sid, False
        log.info("session.reopened", namespace=target.ns.name, session_id=target.key.id, replica=target.replica.url)

    async def forgotten(self, target: Target) -> SessionLost:
        """The replica answered 404 for the upstream session we hold: it restarted or dropped it."""
        assert target.key is not None
        await self.store.lose(target.ns.name, target.key)
        key, ns = target.key.id, target.ns.name
        return SessionLost(
            f"session {key!r} was lost: its replica of {ns!r} no longer knows it",
            data={"session": key, "namespace": ns},
        )

    @staticmethod
    def as_lost(target: Target | Degraded, exc: Exception) -> Exception:
        """A replica failure seen by a pinned session means its state is gone: say so, naming the session."""
        if not isinstance(exc, Unavailable) or not isinstance(target, Target) or target.key is None or target.fresh:
            return exc
        key, ns = target.key.id, target.ns.name
        return SessionLost(
            f"session {key!r} was lost: its replica of {ns!r} went away",
            data={"session": key, "namespace": ns},
        )

    def rewriter(self, ns: Namespace, msg: dict[str, Any], *, legacy: bool = False) -> Rewriter:
        method = msg.get("method")
        review = ns.guard.review if method == "tools/list" else None
        return Rewriter(ns.name, method, review, minting=session_handle(msg) == NEW_HANDLE, legacy=legacy)

    async def remember(self, target: Target, rewriter: Rewriter) -> None:
        """Pin the session handle a call minted, or the state of its `input_required` answer, to its replica;
        keep the namespace's last discovery answers, so discovery works while no replica is healthy."""
        ns = target.ns
        if rewriter.minted is not None:
            await self.router.pin(target, SessionKey.handle(rewriter.minted))
        if rewriter.asked is not None and (target.key is None or target.key.kind == "retry"):
            await self.router.pin(target, SessionKey.retry(rewriter.asked))
        seen = rewriter.seen
        if seen is None:
            return
        if rewriter.method == "initialize" and "serverInfo" in seen:
            ns.initialize_result = seen
        elif rewriter.method == "tools/list" and not seen.get("nextCursor") and isinstance(seen.get("tools"), list):
            ns.tools = seen["tools"]
        else:
            return
        await self.save_discovery(ns)

    async def save_discovery(self, ns: Namespace) -> None:
        """Persist what the namespace last answered unless that is what was saved last. A store that refuses
        fails neither the answer nor the probe it came from: it is logged, and the next probe saves again."""
        snapshot = {"initialize": ns.initialize_result, "tools": ns.tools}
        if ns.saved_discovery == snapshot:
            return
        try:
            await self.store.put_blob(f"discovery:{ns.name}", snapshot)
        except Exception as exc:
            log.warning("discovery.save_failed", namespace=ns.name, error=str(exc) or type(exc).__name__)
            return
        ns.saved_discovery = snapshot

    async def load_discovery(self) -> None:
        for ns in self.namespaces.values():
            blob = await self.store.get_blob(f"discovery:{ns.name}") or {}
            ns.initialize_result = ns.initialize_result or blob.get("initialize")
            ns.tools = ns.tools if ns.tools is not None else blob.get("tools")
            ns.saved_discovery = blob or None  # what the store holds: the first probe writes only a change
            ns.guard.approved = await self.store.get_blob(f"tools:{ns.name}") or ns.guard.approved

    def degraded(self, ns: Namespace, msg: dict[str, Any]) -> dict[str, Any]:
        """Answer discovery from the last known answers while no replica can; anything else is Unavailable."""
        method = msg.get("method")
        if method == "initialize" and ns.initialize_result is not None:
            result = copy.deepcopy(ns.initialize_result)
            asked = (msg.get("params") or {}).get("protocolVersion")
            if asked in HANDSHAKE_VERSIONS:
                result["protocolVersion"] = asked
            return result
        if method == "tools/list" and ns.tools is not None:
            if protocol_version(msg) is None:
                return {"tools": ns.tools}
            # a 2026-07-28 result must say how long it keeps (a client that validates refuses it otherwise):
            # a listing served while no replica answers is reused by nobody
            return {"tools": ns.tools, "ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
        if method == "ping":
            return {}
        raise Unavailable(f"namespace {ns.name!r} has no healthy replica", data={"namespace": ns.name})


@contextlib.contextmanager
def traced_forward(target: Target, msg: dict[str, Any], headers: dict[str, str]) -> Iterator[None]:
    """The span of one forwarded message: continues the client's `traceparent` (in `headers`) and replaces
    it there with its own, so the tool server's span is this span's child."""
    parent = extract({k: headers[k] for k in TRACE_CONTEXT if k in headers})  # the rest say nothing of it
    with span(
        f"gateway {target.ns.name} {msg.get('method') or 'response'}",
        kind=SpanKind.CLIENT,
        parent=parent,
        namespace=target.ns.name,
        session_id=target.key.id if target.key else None,
        method=msg.get("method"),
        tool=tool_name(msg),
        replica=target.replica.url,
    ) as current:
        inject(headers)
        try:
            yield
        except Exception as exc:
            annotate(current, outcome=type(exc).__name__)
            raise
        annotate(current, outcome="ok")
