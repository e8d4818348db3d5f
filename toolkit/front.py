"""The one ASGI layer in front of a tool server: drain gate, replica headers, JSON-RPC refusals, `/mcp` routing.

Every MCP call crosses this layer, so it is one function and one `send` wrapper rather than a stack: measured
with cProfile, Starlette's error, exception and routing middleware plus two wrappers of our own were a tenth of
a refused call's Python work. What it does for each HTTP request:

- a draining replica refuses a request that would open a session it does not hold (`toolkit.drain`);
- every answer carries the replica's room (and whether it drains), and calls in flight are counted;
- on the MCP paths, an error answer that is not JSON becomes a JSON-RPC error body with the same status: the
  SDK's transport answers some refusals as plain text (a wrong `Content-Type`, a body over the limit, a bad
  `Host` or `Origin`), and a client parses JSON-RPC there;
- `/mcp` goes straight to the SDK's streamable HTTP app; everything else (and the lifespan) to Starlette, whose
  router answers what `/mcp` does not take (405) and the other routes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus

import structlog
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit.drain import DRAINED_CODE, DRAINED_WORDS, Drain
from toolkit.wire import RESET_HEADER, SESSION_HEADER

log = structlog.get_logger(__name__)

MCP_METHODS = frozenset({"GET", "POST", "DELETE"})
_RESET = RESET_HEADER.encode()


def _is_json(raw: list[tuple[bytes, bytes]]) -> bool:
    kind = Headers(raw=raw).get("content-type", "")
    return kind.split(";")[0].strip().lower() == "application/json"


def rpc_error(status: int, text: str, code: int = INVALID_REQUEST) -> tuple[Message, Message]:
    """The start and body of a JSON-RPC error answer (`id` null: the request's id may be unknown)."""
    payload = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    return {"type": "http.response.start", "status": status, "headers": headers}, {
        "type": "http.response.body",
        "body": payload,
    }


class Front:
    """The tool server's ASGI app: `mcp` serves `/mcp`, `rest` everything else (routes and lifespan)."""

    def __init__(
        self,
        *,
        mcp: ASGIApp,
        rest: ASGIApp,
        drain: Drain,
        moved: Callable[[str, str], None],
        rpc_paths: tuple[str, ...],
    ) -> None:
        self.mcp, self.rest, self.drain, self.moved, self.rpc_paths = mcp, rest, drain, moved, rpc_paths

    def _covers(self, path: str) -> bool:
        """Whether `path` is an MCP path (exact, or under a prefix ending in `/`), whose errors are JSON-RPC."""
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.rpc_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.rest(scope, receive, send)
        drain = self.drain
        if drain.draining and drain.opens_session(scope):
            refusal = _Answer(send, drain, rewrites=False)  # stamped: the gateway reads that it drains
            for message in rpc_error(503, DRAINED_WORDS, DRAINED_CODE):
                await refusal.send(message)
            return
        for name, value in scope["headers"]:
            if name == _RESET and value:
                if (sid := Headers(scope=scope).get(SESSION_HEADER)) is not None:
                    self.moved(sid, value.decode("latin-1"))
                break
        path = scope["path"]
        answer = _Answer(send, drain, rewrites=self._covers(path))
        app = self.mcp if path == "/mcp" and scope["method"] in MCP_METHODS else self.rest
        drain.in_flight += 1
        try:
            await app(scope, receive, answer.send)
        except Exception:
            if answer.started:
                raise  # uvicorn closes the connection and logs it
            log.exception("server.request_failed", path=path)
            for message in rpc_error(500, "internal server error", INTERNAL_ERROR):
                await answer.send(message)
        finally:
            drain.in_flight -= 1
            drain.changed()


class _Answer:
    """One request's `send`: stamps the replica headers and, on MCP paths, rewrites a non-JSON error answer."""

    __slots__ = ("_body", "_drain", "_held", "_rewrites", "_send", "started")

    def __init__(self, send: Send, drain: Drain, *, rewrites: bool) -> None:
        self._send, self._drain, self._rewrites = send, drain, rewrites
        self._held: Message | None = None  # the start of an error answer being rewritten
        self._body = bytearray()
        self.started = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self._rewrites and message["status"] >= 400 and not _is_json(message["headers"]):
                self._held = message
                return
            self._drain.stamp(MutableHeaders(scope=message))
            return await self._send(message)
        if self._held is None or message["type"] != "http.response.body":
            return await self._send(message)
        self._body.extend(message.get("body", b""))
        if message.get("more_body", False):
            return
        status = self._held["status"]
        text = self._body.decode(errors="replace").strip() or HTTPStatus(status).phrase
        start, body = rpc_error(status, text)
        headers = MutableHeaders(raw=[h for h in self._held["headers"] if h[0].lower() != b"content-length"])
        for name, value in start["headers"]:
            headers[name.decode()] = value.decode()
        self._drain.stamp(headers)
        await self._send({**self._held, "headers": headers.raw})
        await self._send(body)
