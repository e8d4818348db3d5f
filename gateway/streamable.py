"""Streamable HTTP at `/{ns}/mcp`: an HTTP-level relay to the session's replica.

Request bodies go upstream byte for byte; responses come back event by event, rewritten only
where `messages.Rewriter` says. A client that closes a response stream closes the upstream one
too, which is how the 2026 protocol cancels a request.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import structlog
from starlette.types import Receive, Scope, Send

from gateway.asgi import header, read_body, send_bytes, send_error, session_header
from gateway.errors import BadUpstream, GatewayError, InvalidRequest, UnknownSession, error_body
from gateway.messages import Rewriter, parse_message
from gateway.pipeline import Outcome, count_error, deliver, end_session, record
from gateway.routing import Degraded, Namespace, Target
from gateway.service import Gateway
from gateway.upstream import open_stream, upstream_errors
from toolkit.mcpwire import sse
from toolkit.mcpwire.http import Response, Timeouts

log = structlog.get_logger(__name__)

PASS_HEADERS = frozenset({b"content-type", b"cache-control", b"x-accel-buffering"})


async def handle_mcp(gw: Gateway, ns: Namespace, scope: Scope, receive: Receive, send: Send) -> None:
    method = scope["method"]
    if method == "POST":
        await _post(gw, ns, scope, receive, send)
    elif method == "GET":
        await _get(gw, ns, scope, receive, send)
    elif method == "DELETE":
        await _delete(gw, ns, scope, send)
    else:
        await send_bytes(send, 405, b"method not allowed", b"text/plain", [(b"allow", b"GET, POST, DELETE")])


async def _post(gw: Gateway, ns: Namespace, scope: Scope, receive: Receive, send: Send) -> None:
    start = time.perf_counter()
    reply = _Reply(gw, ns, header(scope, b"mcp-session-id"), receive, send)
    msg: dict[str, Any] = {}
    try:
        body = await read_body(scope, receive, gw.cfg.security.max_body_bytes)
        msg = parse_message(body)
        reply.xsid = session_header(scope)
    except Exception as exc:
        await reply.fail(None, msg, exc)
        return record(gw, ns, msg.get("method"), "error", start, None, reply.err)
    outcome, target = await deliver(gw, ns, msg, body, scope["headers"], reply)
    record(gw, ns, msg.get("method"), outcome, start, target, reply.err)


class _Reply:
    """Answers one POSTed message on its HTTP response."""

    def __init__(self, gw: Gateway, ns: Namespace, sid: str | None, receive: Receive, send: Send) -> None:
        self.gw, self.ns, self.receive, self.send = gw, ns, receive, send
        self.sid = sid
        self.xsid: str | None = None
        self.answer_sid = sid
        """The session id the answer carries: the one the message came in, or the one it opened."""
        self.err: GatewayError | None = None

    def _sid_header(self) -> list[tuple[bytes, bytes]]:
        return [(b"mcp-session-id", self.answer_sid.encode())] if self.answer_sid else []

    async def watch(self, cancel: anyio.CancelScope) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        cancel.cancel()

    async def open(self, target: Target | Degraded, upstream_sid: str | None) -> str:
        self.answer_sid = await self.gw.router.open_session(target, upstream_sid)
        return self.answer_sid

    async def answer(self, msg: dict[str, Any], result: dict[str, Any] | None) -> None:
        if result is None:
            await send_bytes(self.send, 202, b"")
            return
        answer = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        await send_bytes(self.send, 200, json.dumps(answer).encode(), extra=self._sid_header())

    async def fail(self, target: Target | Degraded | None, msg: dict[str, Any], exc: Exception) -> None:
        self.err = count_error(self.gw, self.ns, exc)
        await send_error(self.send, msg.get("id"), self.err, self._sid_header())

    async def abandon(self, target: Target) -> None:
        """A session that never started leaves nothing."""
        if target.sid is not None:
            await self.gw.router.close_session(target.sid)
        await self.gw.router.drop_pin(self.ns, target.key)

    async def relay(self, target: Target, msg: dict[str, Any], response: Response) -> Outcome:
        """Send the upstream's answer to the client."""
        gw, send = self.gw, self.send
        rid, method = msg.get("id"), msg.get("method")
        headers = [(k, v) for k, v in response.headers.raw if k in PASS_HEADERS]  # names come lowercased
        if method == "initialize" and self.sid is None and response.status_code == 200:
            await self.open(target, response.headers.get("mcp-session-id"))
        headers += self._sid_header()
        rewriter = gw.rewriter(self.ns, msg)
        ctype = response.headers.get("content-type", "")
        outcome: Outcome
        if ctype.startswith("text/event-stream") and response.status_code == 200:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            outcome = await _stream(gw, target, rid, response, rewriter, send)
        else:
            try:
                with upstream_errors(target.replica):
                    data = await response.aread()
                if ctype.startswith("application/json"):
                    data, parsed = await rewriter.apply(data)
                    if rid is not None and not _answers(parsed, rid, allow_null=response.status_code >= 400):
                        raise BadUpstream(f"a replica of {self.ns.name!r} answered with invalid JSON-RPC")
                elif rid is not None and response.status_code < 300:
                    what = ctype or "no content type"
                    raise BadUpstream(f"a replica of {self.ns.name!r} answered a request with {what}, not MCP")
            except GatewayError as exc:
                await send_error(send, rid, gw.as_lost(target, exc), self._sid_header())
                return "error"
            extra = [(k, v) for k, v in headers if k.lower() != b"content-type"]
            await send_bytes(send, response.status_code, data, ctype.encode() or b"text/plain", extra)
            outcome = "ok" if response.status_code < 400 else "error"
        await gw.remember(target, rewriter)
        return outcome


def _answers(parsed: Any, rid: Any, *, allow_null: bool = False) -> bool:
    if not isinstance(parsed, dict) or ("result" not in parsed and "error" not in parsed):
        return False
    return parsed.get("id") == rid or (allow_null and parsed.get("id") is None)


async def _stream(
    gw: Gateway,
    target: Target,
    rid: Any,
    response: Response,
    rewriter: Rewriter,
    send: Send,
) -> Outcome:
    """Relay an SSE response event by event; a request's stream ends at its answer."""
    answered = rid is None
    finished = False
    failure: Exception | None = None
    try:
        with upstream_errors(target.replica):
            async for event, data in sse.events(response):
                if data:
                    new, parsed = await rewriter.apply(data)
                    if parsed is None:
                        log.warning("upstream.garbage", namespace=target.ns.name, bytes=len(data))
                        continue
                    if new is not data:
                        event = sse.event_with_data(event, new)
                    if not answered and _answers(parsed, rid):
                        # the answer ends a request's stream: finish now rather than wait for the upstream's end
                        await send({"type": "http.response.body", "body": event + b"\n\n", "more_body": False})
                        return "ok"
                await send({"type": "http.response.body", "body": event + b"\n\n", "more_body": True})
    except GatewayError as exc:
        failure = gw.as_lost(target, exc)
    if not answered:
        err = failure or BadUpstream(f"a replica of {target.ns.name!r} closed the stream without answering")
        _, body = error_body(rid, err)
        event = b"event: message\ndata: " + body + b"\n\n"
        await send({"type": "http.response.body", "body": event, "more_body": False})
        finished = True
    if not finished:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return "ok" if answered and failure is None else "error"


async def _get(gw: Gateway, ns: Namespace, scope: Scope, receive: Receive, send: Send) -> None:
    """The standalone stream: server-initiated notifications and requests of the session."""
    sid = header(scope, b"mcp-session-id")
    try:
        if sid is None:
            raise InvalidRequest("GET needs an mcp-session-id header")
        target = await gw.router.resolve(ns, sid, None, {})
        if isinstance(target, Degraded):
            await send_bytes(send, 405, b"", b"text/plain")
            return
        headers = ns.rules.apply(scope["headers"])
        if target.upstream_sid:
            headers["mcp-session-id"] = target.upstream_sid
        timeout = Timeouts(connect=ns.cfg.connect_timeout_s, read=None)
        response = await open_stream(gw.client, target.replica, "GET", headers, http_timeout=timeout)
    except Exception as exc:
        await send_error(send, None, exc)
        return
    try:
        ctype = response.headers.get("content-type", "")
        if response.status_code != 200 or not ctype.startswith("text/event-stream"):
            body = await response.aread()
            await send_bytes(send, response.status_code, body, ctype.encode() or b"text/plain")
            return
        passed = [(k, v) for k, v in response.headers.raw if k.lower() in PASS_HEADERS]
        await send(
            {"type": "http.response.start", "status": 200, "headers": [*passed, (b"mcp-session-id", sid.encode())]}
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(_Reply(gw, ns, sid, receive, send).watch, tg.cancel_scope)
            await _stream(gw, target, None, response, gw.rewriter(ns, {}), send)
            tg.cancel_scope.cancel()
    finally:
        await response.aclose()


async def _delete(gw: Gateway, ns: Namespace, scope: Scope, send: Send) -> None:
    """End the MCP session upstream and here; a pin keyed by the session itself is cleaned up too."""
    sid = header(scope, b"mcp-session-id")
    rec = await gw.store.get_session(sid) if sid else None
    if sid is None or rec is None or rec.namespace != ns.name:
        await send_error(send, None, UnknownSession(f"unknown MCP session {sid!r}"))
        return
    await end_session(gw, ns, sid, rec, ns.rules.apply(scope["headers"]))
    await send_bytes(send, 200, b"", b"text/plain")
