"""Legacy HTTP+SSE at `/{ns}/sse` + `/{ns}/messages/`: what vLLM's `--tool-server` speaks.

Each SSE connection is bridged to one upstream streamable-HTTP session: a POSTed message is
answered `202` at once and forwarded; whatever the upstream answers (responses, progress, logs,
sampling and elicitation requests) is written to the client's event stream, and so is what the
upstream's standalone stream carries once the session is initialized.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
import structlog
from anyio.abc import TaskGroup
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

from gateway.asgi import header, read_body, send_bytes, send_error, session_header
from gateway.errors import BadUpstream, GatewayError, UnknownSession, error_body
from gateway.messages import Rewriter, envelope_headers, legacy_listing, parse_message
from gateway.outbox import Outbox
from gateway.pipeline import Outcome, count_error, deliver, end_session, record
from gateway.routing import Degraded, Namespace, Target, new_session_id
from gateway.service import Gateway
from gateway.upstream import open_stream, upstream_errors
from toolkit.mcpwire import sse
from toolkit.mcpwire.http import Response, Timeouts

log = structlog.get_logger(__name__)

KEEPALIVE_S = 15.0


@dataclass
class LegacySession:
    sid: str
    ns: Namespace
    xsid: str | None
    out: Outbox
    tg: TaskGroup | None = None
    opened: bool = False
    used_tools: bool = False
    streaming: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    modern: dict[str, anyio.CancelScope] = field(default_factory=dict)
    """2026-era requests in flight, by JSON id: cancelling one closes its upstream stream."""

    async def push(self, data: bytes) -> None:
        await self.out.put(b"event: message\ndata: " + data + b"\n\n")


async def handle_sse(gw: Gateway, ns: Namespace, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["method"] != "GET":
        await send_bytes(send, 405, b"method not allowed", b"text/plain", [(b"allow", b"GET")])
        return
    try:
        xsid = session_header(scope)
    except GatewayError as exc:
        await send_error(send, None, exc)
        return
    sid = new_session_id()
    session = LegacySession(sid, ns, xsid, Outbox(gw.cfg.legacy_sse))
    gw.legacy[sid] = session
    host = header(scope, b"host") or "{}:{}".format(*scope["server"])
    endpoint = f"{scope['scheme']}://{host}/{ns.name}/messages/?session_id={sid}"
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = f"event: endpoint\ndata: {endpoint}\n\n".encode()
        await send({"type": "http.response.body", "body": first, "more_body": True})
        async with anyio.create_task_group() as tg:
            session.tg = tg
            tg.start_soon(_pump, session.out, send)
            tg.start_soon(_keepalive, session.out)
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()
    finally:
        gw.legacy.pop(sid, None)
        with anyio.CancelScope(shield=True):
            await _close(gw, session)


async def _pump(out: Outbox, send: Send) -> None:
    while True:
        await send({"type": "http.response.body", "body": await out.get(), "more_body": True})


async def _keepalive(out: Outbox) -> None:
    """A comment now and then keeps proxies from closing a quiet stream; one with events waiting needs none."""
    while True:
        await anyio.sleep(KEEPALIVE_S)
        if not out:
            await out.put(b": keepalive\n\n")


async def _close(gw: Gateway, session: LegacySession) -> None:
    rec = await gw.store.get_session(session.sid) if session.opened else None
    if rec is not None:
        static = dict(session.ns.cfg.headers.static)
        await end_session(gw, session.ns, session.sid, rec, static, used_tools=session.used_tools)


async def handle_messages(gw: Gateway, ns: Namespace, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["method"] != "POST":
        await send_bytes(send, 405, b"method not allowed", b"text/plain", [(b"allow", b"POST")])
        return
    sid = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id") or [None])[0]
    start = time.perf_counter()
    session = gw.legacy.get(sid) if sid else None
    try:
        if session is None or session.ns.name != ns.name or session.tg is None:
            raise UnknownSession(f"unknown SSE session {sid!r}: open {ns.name}/sse again")
        body = await read_body(scope, receive, gw.cfg.security.max_body_bytes)
        msg = parse_message(body)
        headers = _upstream_headers(scope, session, msg)
        session.out.admit(session.sid)
    except GatewayError as exc:
        err = count_error(gw, ns, exc)
        await send_error(send, None, err)
        record(gw, ns, None, "error", start, None, err)
        return
    await send_bytes(send, 202, b"Accepted", b"text/plain")
    if _abort_modern(session, msg):
        session.out.finished()
        return
    session.tg.start_soon(_forward, gw, session, msg, body, headers)


def _upstream_headers(scope: Scope, session: LegacySession, msg: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """The client's headers with those streamable HTTP needs: the routing headers a 2026-era message derives from
    its body (`envelope_headers`, which checks them), else the protocol version the session negotiated."""
    headers = [(k, v) for k, v in scope["headers"] if k not in (b"accept", b"content-type", b"mcp-protocol-version")]
    headers += [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]
    routing = envelope_headers(msg)
    if not routing and (version := session.extra.get("version")):
        routing = {"mcp-protocol-version": version}
    headers = [(k, v) for k, v in headers if k.decode() not in routing]
    return headers + [(k.encode(), v.encode()) for k, v in routing.items()]


def _abort_modern(session: LegacySession, msg: dict[str, Any]) -> bool:
    """A cancel for a 2026-era request in flight: streamable HTTP cancels by closing the request's
    stream (it takes no client notifications), so the bridge closes it instead of forwarding."""
    params = msg.get("params")
    if msg.get("method") != "notifications/cancelled" or not isinstance(params, dict):
        return False
    scope = session.modern.get(_id_key(params.get("requestId")))
    if scope is None:
        return False
    scope.cancel()
    return True


def _id_key(rid: Any) -> str:
    return json.dumps(rid)


async def _forward(
    gw: Gateway, session: LegacySession, msg: dict[str, Any], body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    rid, method = msg.get("id"), msg.get("method")
    try:
        if rid is not None and method is not None and "mcp-method" in {k.decode() for k, _ in headers}:
            with anyio.CancelScope() as scope:  # a 2026-era request: cancellable by closing its stream
                session.modern[_id_key(rid)] = scope
                try:
                    await _forward_one(gw, session, msg, body, headers)
                finally:
                    session.modern.pop(_id_key(rid), None)
        else:
            await _forward_one(gw, session, msg, body, headers)
    finally:
        session.out.finished()


async def _forward_one(
    gw: Gateway, session: LegacySession, msg: dict[str, Any], body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    start = time.perf_counter()
    session.used_tools = session.used_tools or msg.get("method") == "tools/call"
    reply = _Reply(gw, session)
    outcome, target = await deliver(gw, session.ns, msg, body, headers, reply)
    record(gw, session.ns, msg.get("method"), outcome, start, target, reply.err)


class _Reply:
    """Answers one POSTed message on the client's SSE stream (the POST itself was answered 202)."""

    def __init__(self, gw: Gateway, session: LegacySession) -> None:
        self.gw, self.session = gw, session
        self.sid = session.sid if session.opened else None
        self.xsid = session.xsid
        self.err: GatewayError | None = None

    async def watch(self, cancel: anyio.CancelScope) -> None:
        """Nothing to watch: the SSE connection's end cancels the whole session (and a 2026 cancel, the call)."""

    async def open(self, target: Target | Degraded, upstream_sid: str | None) -> str:
        session = self.session
        await self.gw.router.open_session(target, upstream_sid, sid=session.sid)
        session.opened = True
        return session.sid

    async def answer(self, msg: dict[str, Any], result: dict[str, Any] | None) -> None:
        if result is not None:
            shown = legacy_listing(result) if msg.get("method") == "tools/list" else result
            await self.session.push(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": shown}).encode())

    async def fail(self, target: Target | Degraded | None, msg: dict[str, Any], exc: Exception) -> None:
        """A request is answered on the stream; a failed notification or response is only counted."""
        self.err = count_error(self.gw, self.session.ns, self.gw.as_lost(target, exc) if target else exc)
        if msg.get("id") is not None and msg.get("method") is not None:
            _, data = error_body(msg["id"], self.err)
            await self.session.push(data)

    async def abandon(self, target: Target) -> None:
        """A session opened on this connection lives until the connection ends; only a bare pin goes now."""
        if target.sid is None:
            await self.gw.router.drop_pin(self.session.ns, target.key)

    async def relay(self, target: Target, msg: dict[str, Any], response: Response) -> Outcome:
        try:
            await self._relay(target, msg, response)
        except Exception as exc:
            await self.fail(target, msg, exc)
            return "error"
        return "ok"

    async def _relay(self, target: Target, msg: dict[str, Any], response: Response) -> None:
        gw, session = self.gw, self.session
        rid, method = msg.get("id"), msg.get("method")
        if method == "initialize" and response.status_code == 200 and not session.opened:
            await self.open(target, response.headers.get("mcp-session-id"))
        rewriter = gw.rewriter(session.ns, msg, legacy=True)
        answered = rid is None or method is None
        with upstream_errors(target.replica):
            async for data, parsed in _messages(response, rewriter):
                answered = answered or (parsed.get("id") == rid and ("result" in parsed or "error" in parsed))
                await session.push(data)
        if not answered:
            ns, status = session.ns.name, response.status_code
            raise BadUpstream(f"a replica of {ns!r} answered {method} with HTTP {status} and no JSON-RPC response")
        await gw.remember(target, rewriter)
        if method == "initialize" and rewriter.seen is not None:
            version = rewriter.seen.get("protocolVersion")  # the upstream's word, sent in a header: a known one only
            session.extra["version"] = version if version in KNOWN_PROTOCOL_VERSIONS else None
        streams = method == "notifications/initialized" and response.status_code < 300
        if streams and not session.streaming and session.tg:
            session.streaming = True
            session.tg.start_soon(_standalone, gw, session, target)


async def _messages(response: Response, rewriter: Rewriter) -> AsyncIterator[tuple[bytes, dict[str, Any]]]:
    """The JSON-RPC messages of an upstream response, JSON or SSE, rewritten; garbage is dropped."""
    ctype = response.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        data, parsed = await rewriter.apply(await response.aread())
        if isinstance(parsed, dict):
            yield data, parsed
        return
    if not ctype.startswith("text/event-stream"):
        await response.aread()
        return
    async for _, raw in sse.events(response):
        if not raw:
            continue
        data, parsed = await rewriter.apply(raw)
        if isinstance(parsed, dict):
            yield data, parsed
        else:
            log.warning("upstream.garbage", namespace=rewriter.namespace, bytes=len(raw))


async def _standalone(gw: Gateway, session: LegacySession, target: Target) -> None:
    """Relay the upstream session's standalone stream (server-initiated messages) into the SSE stream."""
    headers = {**session.ns.cfg.headers.static, "accept": "text/event-stream"}
    if target.upstream_sid:
        headers["mcp-session-id"] = target.upstream_sid
    try:
        response = await open_stream(
            gw.client, target.replica, "GET", headers, http_timeout=Timeouts(connect=2.0, read=None)
        )
        try:
            with upstream_errors(target.replica):
                async for data, _ in _messages(response, gw.rewriter(session.ns, {})):
                    await session.push(data)
        finally:
            await response.aclose()
    except GatewayError as exc:
        log.info("legacy.standalone_closed", namespace=session.ns.name, error=exc.message)
