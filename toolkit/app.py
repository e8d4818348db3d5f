"""A tool server's ASGI app: legacy SSE (`/sse`, `/messages/`) and streamable HTTP (`/mcp`) over one MCP server,
`/healthz`, `/readyz` and `/metrics`, behind `Front`, with the lifespan that runs the backend and the reaper.

It reads the `ToolServer` through `Served`, what the app needs of it, so the server module can build its app
without this module importing it back."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import anyio
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ListToolsResult
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from toolkit import admin, handles
from toolkit.answers import SingleAnswerSessionManager
from toolkit.callers import Callers
from toolkit.drain import Drain
from toolkit.front import MCP_METHODS, Front
from toolkit.loopback import loopback
from toolkit.loops import Loops
from toolkit.metrics import ToolMetrics
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sessions import SessionRegistry
from toolkit.settings import ToolServerSettings
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.tasks import TaskStore

log = structlog.get_logger(__name__)

RPC_PATHS = ("/mcp", "/messages/")
"""The paths whose refusals are JSON-RPC error bodies (`toolkit.front`)."""


class Served(Protocol):
    """What the app reads of a `ToolServer`."""

    mcp: MCPServer
    settings: ToolServerSettings
    namespace: str
    sessions: SessionRegistry[Any]
    loops: Loops
    drain: Drain
    metrics: ToolMetrics
    runtime: ContainerRuntime | None
    backend: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None
    callers: Callers[Any]
    keeper: SnapshotKeeper | None
    tasks: TaskStore

    async def end_session(self, key: str, owner: str | None = None) -> bool: ...


def build_app(server: Served) -> Front:
    """`/sse` + `/messages/`, `/mcp`, `/healthz`, `/readyz`, `/metrics` behind `Front` (whose `drain`
    `toolkit.serve` runs on SIGTERM); the lifespan runs the backend and the reaper."""
    declare_handles(server.mcp, server.callers.idle_lifetime)
    security = _security(server.settings)
    limit = server.settings.max_body_bytes
    sse = SseServerTransport("/messages/", security_settings=security, max_request_body_size=limit)
    lowlevel = server.mcp._lowlevel_server  # the SDK exposes the low-level server only this way

    async def handle_sse(request: Request) -> Response:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
        return Response()

    manager = SingleAnswerSessionManager(lowlevel, security_settings=security, max_request_body_size=limit)
    mcp = StreamableHTTPASGIApp(manager)
    healthz, readyz = _health(server)
    rest = Starlette(
        routes=[
            Route("/sse", handle_sse, methods=["GET"]),
            Mount("/messages/", app=sse.handle_post_message),
            Route("/mcp", mcp, methods=sorted(MCP_METHODS)),  # what Front passes on here is a 405
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", server.metrics.endpoint),
            *admin.routes(server),
        ],
        lifespan=_lifespan(server, manager),
    )
    return Front(mcp=mcp, rest=rest, drain=server.drain, moved=server.callers.moved, rpc_paths=RPC_PATHS)


def _lifespan(
    server: Served, manager: SingleAnswerSessionManager
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """The backend, the streamable-HTTP manager, the MCP tasks, the reaper and the memory sampler run while the app
    does; every task still working is cancelled and every session closed as it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if server.backend is not None:
                await stack.enter_async_context(server.backend())
            await stack.enter_async_context(manager.run())
            await stack.enter_async_context(server.tasks.running())
            tg = await stack.enter_async_context(anyio.create_task_group())
            server.loops.start(tg, "reaper", server.sessions.reap_forever, server.settings.reap_interval_s)
            if server.keeper is not None:
                server.loops.start(tg, "snapshot-sweeper", server.keeper.sweep_forever)
            if server.sessions.autosave is not None:
                server.loops.start(tg, "snapshot-autosave", server.sessions.autosave.run)
            if server.runtime is not None and server.runtime.samples_memory:
                server.loops.start(tg, "memory-sampler", server.runtime.sample_memory_forever)
            log.info("server.started", namespace=server.namespace, port=server.settings.port)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await server.sessions.close_all()
                log.info("server.stopped", namespace=server.namespace)

    return lifespan


def _health(server: Served) -> tuple[Callable[[Request], Any], Callable[[Request], Any]]:
    """`/healthz` (alive: the reaper still runs; a draining server is alive too) and `/readyz` (ready for new
    sessions: alive and not draining)."""

    async def healthz(request: Request) -> Response:
        status, body = server.loops.health()
        extra = {"namespace": server.namespace, "sessions": len(server.sessions), "draining": server.drain.draining}
        return JSONResponse(body | extra, status)

    async def readyz(request: Request) -> Response:
        status, body = server.loops.health()
        if status == 200 and server.drain.draining:
            status, body = 503, {"status": "draining"}
        return JSONResponse(body | {"namespace": server.namespace}, status)

    return healthz, readyz


def _security(settings: ToolServerSettings) -> TransportSecuritySettings | None:
    hosts = settings.accepted_host_headers
    if not hosts and not loopback(settings.host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = hosts or [f"{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")]
    origins = [f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)


def declare_handles(mcp: MCPServer, idle_lifetime: str) -> None:
    """Every tool that takes `session_handle` declares it for `Mcp-Param-*` (the spec's `x-mcp-header`)
    and says how long an idle handle lives; done once all tools (and their final schemas) are registered."""
    prop = {
        "type": "string",
        "x-mcp-header": handles.HEADER_TOKEN,
        "description": (
            f"Only for clients without x-session-id that want state across calls: {handles.NEW!r} starts "
            "a session and the answer gives its handle (in structuredContent and the text); pass that handle "
            f"in later calls. An idle handle lives {idle_lifetime}. Without it a call keeps no state."
        ),
    }
    for tool in mcp._tool_manager.list_tools():  # the SDK exposes registered tools only this way
        if handles.ARGUMENT in inspect.signature(tool.fn).parameters:
            properties = {**tool.parameters.get("properties", {}), handles.ARGUMENT: prop}
            tool.parameters = {**tool.parameters, "properties": properties}
    lowlevel = mcp._lowlevel_server  # the SDK exposes the low-level server only this way
    listed = lowlevel.get_request_handler("tools/list")
    assert listed is not None

    async def list_tools(ctx: Any, params: Any) -> Any:
        """Legacy SSE is what vLLM's `--tool-server` reads into the model's prompt: there the tools keep
        the shapes the model was trained on (an SSE connection is a session; it needs no handle). That
        listing depends on the caller's transport, so it is never for a shared cache (`private`)."""
        result = await listed.handler(ctx, params)
        assert isinstance(result, ListToolsResult)  # the SDK's own tools/list handler
        if getattr(ctx.request, "query_params", {}).get("session_id"):
            shown = [_without_handle(t) for t in result.tools]
            result = result.model_copy(update={"tools": shown, "cache_scope": "private"})
        return result

    lowlevel.add_request_handler("tools/list", listed.params_type, list_tools)


def _without_handle(tool: Any) -> Any:
    schema = handles.without_argument(tool.input_schema)
    return tool if schema is tool.input_schema else tool.model_copy(update={"input_schema": schema})
