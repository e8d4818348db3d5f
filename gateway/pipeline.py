"""The one way a client message goes through the gateway, whichever transport brought it.

the 2026-07-28 headers checked against the body -> resolve the target -> discovery without a replica -> the
tool-approval check -> a degraded answer when no replica can take it -> forward -> relay the answer -> drop the
pin `cleanup_session` ended, or the fresh pin of a message that failed; pin the session handle a call minted.
A transport supplies only a `Reply`: how it writes answers and errors back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, Literal, Protocol

import anyio
import structlog

from gateway import envelope
from gateway.errors import GatewayError, Unavailable, to_error
from gateway.health import cleanup
from gateway.keys import SessionKey
from gateway.messages import tool_name
from gateway.routing import Degraded, Namespace, Target
from gateway.service import Gateway
from gateway.store import SessionRecord
from gateway.upstream import open_stream
from toolkit.mcpwire.http import Response

log = structlog.get_logger(__name__)

DISCOVERY = frozenset({"initialize", "tools/list", "ping"})
"""Methods a client may send before the gateway has seen any replica: answered from the last known answers."""

Outcome = Literal["ok", "error", "degraded", "cancelled"]


class Reply(Protocol):
    """How one transport answers a message."""

    sid: str | None
    """The gateway MCP session the message arrived in; None before `initialize` succeeded."""
    xsid: str | None
    """The client's `x-session-id`, if it sent one."""
    err: GatewayError | None
    """The error the message was answered with, once `fail` ran."""

    async def watch(self, cancel: anyio.CancelScope) -> None:
        """Cancel the forwarded call when the client goes away (return at once where it cannot)."""

    async def open(self, target: Target | Degraded, upstream_sid: str | None) -> str:
        """Record the MCP session an accepted `initialize` starts; returns its gateway session id."""

    async def answer(self, msg: dict[str, Any], result: dict[str, Any] | None) -> None:
        """A degraded answer: `result` for a request, None for a notification or a response."""

    async def relay(self, target: Target, msg: dict[str, Any], response: Response) -> Outcome:
        """Write the upstream's answer back, errors included ("ok" or "error")."""

    async def fail(self, target: Target | Degraded | None, msg: dict[str, Any], exc: Exception) -> None:
        """Write the error of a message that could not be forwarded (and keep it in `err`)."""

    async def abandon(self, target: Target) -> None:
        """Undo what a failed message started before it had a session (its pin, a session it opened)."""


async def deliver(
    gw: Gateway, ns: Namespace, msg: dict[str, Any], body: bytes, headers: Iterable[tuple[bytes, bytes]], reply: Reply
) -> tuple[Outcome, Target | Degraded | None]:
    """Take one client message all the way; returns how it ended and where it went."""
    target: Target | Degraded | None = None
    try:
        envelope.check(msg, headers, ns.tools)
        target = await _route(gw, ns, msg, reply)
        gw.check_call(ns, msg)
        if isinstance(target, Degraded):
            await _degraded(gw, target, msg, reply)
            return "degraded", target
        target, outcome = await _exchange(gw, target, msg, body, headers, reply)
    except Exception as exc:
        if target is not None and target.fresh and target.sid is None:
            await gw.router.drop_pin(ns, target.key)  # the pin was made for this message: no leak
        await reply.fail(target, msg, exc)
        return "error", target
    if outcome == "error" and target.fresh and reply.sid is None:
        await reply.abandon(target)
    if outcome == "ok" and (tool_name(msg) == "cleanup_session" or (target.key and target.key.kind == "retry")):
        await gw.router.drop_pin(ns, target.key)  # the session ended, or the retry that needed the replica is done
    return outcome, target


async def end_session(
    gw: Gateway, ns: Namespace, sid: str, rec: SessionRecord, headers: dict[str, str], *, used_tools: bool = True
) -> None:
    """End an MCP session the gateway holds, the same way for both transports (a DELETE, or the end of an SSE
    connection). A session keyed by itself that used tools has its tool state freed on its replica
    (`cleanup_session`, then the upstream session's DELETE); one keyed by `x-session-id` keeps its tool state
    (the conversation lives on), so only its upstream MCP session is deleted. Bounded in time; a failure is
    logged, and the session is forgotten here either way."""
    pin = await gw.store.get_pin(ns.name, rec.key) if rec.key.by_session else None
    replica = ns.replicas.get(rec.replica or "")
    try:
        with anyio.move_on_after(gw.cfg.health.timeout_s * 3):
            if pin is not None and used_tools:
                await cleanup(gw, ns, rec.key, pin)
            elif replica is not None and replica.available and rec.upstream_sid:
                delete = headers | {"mcp-session-id": rec.upstream_sid}
                await (await open_stream(gw.client, replica, "DELETE", delete)).aclose()
    except GatewayError as exc:
        log.info("session.end_failed", namespace=ns.name, session_id=rec.key.id, error=exc.message)
    await gw.router.close_session(sid)


def count_error(gw: Gateway, ns: Namespace, exc: BaseException) -> GatewayError:
    """The error a client is told for `exc`, counted by its JSON-RPC code."""
    err = to_error(exc)
    gw.metrics.errors.labels(ns.name, str(err.code)).inc()
    return err


def record(
    gw: Gateway,
    ns: Namespace,
    method: str | None,
    outcome: str,
    start: float,
    target: Target | Degraded | None,
    err: GatewayError | None = None,
) -> None:
    """One message in the request metrics and one `gateway.request` log line, whichever transport."""
    seconds = time.perf_counter() - start
    gw.metrics.observe(ns.name, method, outcome, seconds)
    log.info(
        "gateway.request",
        namespace=ns.name,
        method=method,
        session_id=target.key.id if target and target.key else None,
        replica=target.replica.url if isinstance(target, Target) else None,
        outcome=outcome,
        ms=round(seconds * 1000, 2),
        **({"error": err.message, "code": err.code} if err is not None else {}),
    )


async def _route(gw: Gateway, ns: Namespace, msg: dict[str, Any], reply: Reply) -> Target | Degraded:
    """The message's target; with no replica available, discovery outside a session still gets one
    (without a replica, so it is answered degraded)."""
    try:
        return await gw.router.resolve(ns, reply.sid, reply.xsid, msg)
    except Unavailable:
        if reply.sid is not None or msg.get("method") not in DISCOVERY:
            raise
        return Degraded(ns, SessionKey.header(reply.xsid))


async def _degraded(gw: Gateway, target: Degraded, msg: dict[str, Any], reply: Reply) -> None:
    """No replica for this message: discovery from the last known answers, a clear error for the rest."""
    if "id" not in msg or msg.get("method") is None:
        await reply.answer(msg, None)
        return
    result = gw.degraded(target.ns, msg)
    if msg["method"] == "initialize" and reply.sid is None:
        await reply.open(target, None)
    await reply.answer(msg, result)


WATCH_AFTER_S = 0.05
"""How long a forwarded call runs before its client is watched for going away. Most calls are answered
sooner, and watching costs each one a task; a client that leaves is still noticed, this much later at most."""


class _Watch:
    """Cancels `scope` when the client of a call goes away (`Reply.watch`), once the call has run
    `WATCH_AFTER_S`: a timer, which a call answered before it fires only cancels."""

    def __init__(self, reply: Reply, scope: anyio.CancelScope) -> None:
        self._reply, self._scope = reply, scope
        self._task: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._start)

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._reply.watch(self._scope))
        self._task.add_done_callback(_retrieved)

    def stop(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


def _retrieved(task: asyncio.Task[None]) -> None:
    """A watcher's own failure (its client's receive broke) ends the watch, and is no one else's concern."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("gateway.watch_failed", error=repr(exc))


async def _exchange(
    gw: Gateway,
    target: Target,
    msg: dict[str, Any],
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]],
    reply: Reply,
) -> tuple[Target, Outcome]:
    """Forward and relay. A client that goes away meanwhile cancels both: the upstream connection is
    closed, which is how the 2026 protocol cancels (and harmless for the others)."""
    outcome: Outcome = "cancelled"
    failure: Exception | None = None
    response: Response | None = None
    with anyio.CancelScope() as scope:
        watch = _Watch(reply, scope)
        try:
            try:
                target, response = await gw.forward(target, msg, body, headers)
                if response.status_code == 404 and target.upstream_sid and target.key:
                    failure = await gw.forgotten(target)  # the replica restarted or dropped the session we hold
            except Exception as exc:
                failure = exc
            if response is not None and failure is None:
                try:
                    outcome = await reply.relay(target, msg, response)
                except Exception:
                    log.exception("gateway.relay_failed")
                    outcome = "error"
        finally:
            watch.stop()
    if response is not None:
        if outcome == "ok" and not response.complete:  # read the upstream's end, so the connection is reused
            await response.finish(within_s=1)
        await response.aclose()
    if failure is not None:
        raise failure
    return target, outcome
