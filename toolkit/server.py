"""The tool-server kit: one MCP server served as legacy SSE (`/sse`) and streamable HTTP (`/mcp`).

Every tool server (python, browser, container) is an `MCPServer` named by its namespace plus a
`ToolServer` that owns its sessions, its hidden `cleanup_session` tool, metrics and the ASGI app.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, Protocol

import anyio
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from toolkit.metrics import ToolMetrics
from toolkit.rpc_errors import JsonRpcErrors
from toolkit.sessions import S, SessionRegistry, TooManySessions
from toolkit.settings import ToolServerSettings
from toolkit.tracing import annotate, extract, span

log = structlog.get_logger(__name__)

HIDDEN = {"include_in_prompt": False}
"""Tool `_meta` that tells vLLM to leave a tool out of the model's prompt."""

_SESSION_ID = re.compile(r"^[\x21-\x7e]{1,256}$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Backend(Protocol):
    async def start(self) -> None: ...
    async def aclose(self) -> None: ...


def backend_lifespan(backend: Backend) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:
    """A server lifespan that starts the backend (pool, leftovers, leases) and always closes it."""

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        await backend.start()
        try:
            yield
        finally:
            await backend.aclose()

    return lifespan


class BadSessionId(ToolError):
    """The caller's x-session-id header is not a usable session name."""


def session_key(ctx: Context) -> str:
    """The caller's session: `x-session-id` when sent, else the MCP session (streamable or SSE)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None) or {}
    if (sid := headers.get("x-session-id")) is not None:
        if not _SESSION_ID.match(sid):
            raise BadSessionId("x-session-id must be 1-256 visible ASCII characters")
        return sid
    if sid := headers.get("mcp-session-id"):
        return f"mcp-{sid}"
    query = getattr(request, "query_params", None) or {}
    if sid := query.get("session_id"):
        return f"sse-{sid}"
    return f"conn-{id(ctx.request_context.session):x}"


def _idle_words(idle_s: float) -> str:
    if idle_s < 60:
        return f"{idle_s:.0f} seconds"
    return f"{idle_s / 60:.0f} minutes"


class ToolServer(Generic[S]):
    """Sessions, metrics, `cleanup_session` and the ASGI app around one namespace's `MCPServer`."""

    def __init__(
        self,
        mcp: MCPServer,
        settings: ToolServerSettings,
        session_factory: Callable[[str], Awaitable[S]],
        *,
        lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
        progress_interval_s: float = 20.0,
    ) -> None:
        self.mcp = mcp
        self.namespace = mcp.name
        self.settings = settings
        self.metrics = ToolMetrics(self.namespace)
        self.sessions: SessionRegistry[S] = SessionRegistry(
            session_factory, ttl_s=settings.session_ttl_s, max_sessions=settings.max_sessions
        )
        self.sessions.on_change = self.metrics.sessions.set
        self._lifespan = lifespan
        self._progress_interval_s = progress_interval_s
        mcp.add_tool(
            self._cleanup_session,
            name="cleanup_session",
            meta=HIDDEN,
            description="Free everything this session holds on the server.",
        )

    async def _cleanup_session(self, ctx: Context) -> str:
        key = session_key(ctx)
        async with self.observed("cleanup_session", key, ctx):
            freed = await self.sessions.close(key)
        return f"session {key} cleaned up" if freed else f"session {key} held nothing"

    @contextlib.asynccontextmanager
    async def observed(self, tool: str, key: str, ctx: Context) -> AsyncIterator[None]:
        """One `tool.call` log event, span and the metrics for a call; the outcome is set by what escapes.
        The span continues the trace the caller (the gateway) sent in the MCP request's headers."""
        start = time.perf_counter()
        outcome = "error"
        rid = uuid.uuid4().hex[:12]
        parent = extract(getattr(ctx.request_context.request, "headers", None) or {})
        ids = {"namespace": self.namespace, "session_id": key, "tool": tool, "request_id": rid}
        with (
            structlog.contextvars.bound_contextvars(**ids),
            span(f"{self.namespace}.{tool}", kind=SpanKind.SERVER, parent=parent, **ids) as current,
        ):
            try:
                yield
                outcome = "ok"
            except ToolError:
                outcome = "tool_error"  # the caller's misuse or a sandbox refusal, answered as an error result
                raise
            finally:
                elapsed = time.perf_counter() - start
                self.metrics.observe(tool, outcome, elapsed)
                annotate(current, outcome=outcome)
                log.info("tool.call", ms=round(elapsed * 1000, 2), outcome=outcome)

    @contextlib.asynccontextmanager
    async def session(self, ctx: Context, tool: str) -> AsyncIterator[tuple[str, S]]:
        """The caller's session state for the length of one call, with heartbeats for long calls."""
        key = session_key(ctx)
        async with self.observed(tool, key, ctx):
            try:
                state = await self.sessions.acquire(key)
            except TooManySessions as exc:
                raise ToolError(str(exc)) from exc
            failure: Exception | None = None
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._heartbeat, ctx)
                    try:
                        yield key, state
                    except Exception as exc:  # raised below, outside the group, so it is not wrapped
                        failure = exc
                    finally:
                        tg.cancel_scope.cancel()
            finally:
                self.sessions.release(key)
            if failure is not None:
                raise failure

    def reset_notice(self, key: str) -> str:
        """The line the model reads when the reaper freed this session since its last call; empty otherwise.
        Servers put it first in the call's text so a fresh state is never mistaken for the old one."""
        idle_s = self.sessions.take_reset(key)
        if idle_s is None:
            return ""
        return (
            f"[this session's state was reset after {_idle_words(idle_s)} idle: everything earlier calls "
            "made in it is gone]\n"
        )

    async def _heartbeat(self, ctx: Context) -> None:
        """Progress every few seconds, so SSE clients (vLLM gives up after 300 s of silence) wait."""
        ticks = 0
        while True:
            await anyio.sleep(self._progress_interval_s)
            ticks += 1
            with contextlib.suppress(Exception):
                await ctx.report_progress(ticks, None, f"still running ({ticks * self._progress_interval_s:.0f} s)")

    def _security(self) -> TransportSecuritySettings | None:
        hosts = self.settings.accepted_host_headers
        if not hosts and self.settings.host not in _LOOPBACK:
            return TransportSecuritySettings(enable_dns_rebinding_protection=False)
        hosts = hosts or [f"{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")]
        origins = [f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts]
        return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)

    def build_app(self) -> Starlette:
        """`/sse` + `/messages/`, `/mcp`, `/healthz`, `/metrics`; the lifespan runs the backend and reaper."""
        security = self._security()
        limit = self.settings.max_body_bytes
        sse = SseServerTransport("/messages/", security_settings=security, max_request_body_size=limit)
        lowlevel = self.mcp._lowlevel_server  # the SDK exposes the low-level server only this way

        async def handle_sse(request: Request) -> Response:
            async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
            return Response()

        # Called for its side effect: it creates the session manager whose ASGI app we mount below.
        self.mcp.streamable_http_app(max_request_body_size=limit, transport_security=security, host=self.settings.host)
        manager = self.mcp.session_manager

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with contextlib.AsyncExitStack() as stack:
                if self._lifespan is not None:
                    await stack.enter_async_context(self._lifespan())
                await stack.enter_async_context(manager.run())
                tg = await stack.enter_async_context(anyio.create_task_group())
                tg.start_soon(self.sessions.reap_forever, self.settings.reap_interval_s)
                log.info("server.started", namespace=self.namespace, port=self.settings.port)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await self.sessions.close_all()
                    log.info("server.stopped", namespace=self.namespace)

        async def healthz(request: Request) -> Response:
            return JSONResponse({"status": "ok", "namespace": self.namespace, "sessions": len(self.sessions)})

        return Starlette(
            routes=[
                Route("/sse", handle_sse, methods=["GET"]),
                Mount("/messages/", app=sse.handle_post_message),
                Route("/mcp", StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"]),
                Route("/healthz", healthz),
                Route("/metrics", self.metrics.endpoint),
            ],
            lifespan=lifespan,
            middleware=[Middleware(JsonRpcErrors, paths=("/mcp", "/messages/"))],
        )
