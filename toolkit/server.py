"""The tool-server kit: one MCP server served as legacy SSE (`/sse`) and streamable HTTP (`/mcp`).

Every tool server (python, browser, container) is an `MCPServer` named by its namespace plus a
`ToolServer` that owns its sessions, its hidden `cleanup_session` tool, metrics and the ASGI app.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import anyio
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types import CallToolResult, ContentBlock, ListToolsResult, TextContent
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from toolkit import handles
from toolkit.answers import SingleAnswerSessionManager
from toolkit.drain import Drain
from toolkit.front import MCP_METHODS, Front
from toolkit.handles import BadHandle, Handles
from toolkit.loops import Loops
from toolkit.metrics import ToolMetrics
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sessions import S, SessionGone, SessionRegistry, TooManySessions, idle_words
from toolkit.settings import ToolServerSettings
from toolkit.signature import Body, ToolSignature
from toolkit.tracing import annotate, extract, request_context, span
from toolkit.wire import MEMORY_HEADER, OWNER_HEADER, REQUEST_ID_HEADER, SESSION_HEADER, fleet_secret, read_owner

log = structlog.get_logger(__name__)
T = TypeVar("T")

HIDDEN = {"include_in_prompt": False}
"""Tool `_meta` that tells vLLM to leave a tool out of the model's prompt."""

_SESSION_ID = re.compile(r"^[\x21-\x7e]{1,256}$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
RPC_PATHS = ("/mcp", "/messages/")
"""The paths whose refusals are JSON-RPC error bodies (`toolkit.front`)."""


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


def session_key(ctx: Context) -> str | None:
    """The session the call's transport names: `x-session-id` when sent, else the 2025-era MCP session
    (streamable or SSE); None for a 2026-07-28 request, which belongs to no session."""
    headers = _headers(ctx)
    if (sid := headers.get(SESSION_HEADER)) is not None:
        if not _SESSION_ID.match(sid):
            raise BadSessionId("x-session-id must be 1-256 visible ASCII characters")
        return sid
    if sid := headers.get("mcp-session-id"):
        return f"mcp-{sid}"
    query = getattr(ctx.request_context.request, "query_params", None) or {}
    if sid := query.get("session_id"):
        return f"sse-{sid}"
    return None


class SizeRefused(ToolError):
    """The caller asked for a sandbox larger than this server allows (or named no size it can read)."""


@dataclass(frozen=True, slots=True)
class Sizing(Generic[S]):
    """How a sandbox tool starts a session of the memory size its caller asks for (`MEMORY_HEADER`), up to
    the operator's cap; a session asking nothing (or the default) gets the warm pool's size."""

    default_mb: int
    cap_mb: int
    factory: Callable[[str, int], Awaitable[S]]

    def factory_for(self, ctx: Context) -> Callable[[str], Awaitable[S]] | None:
        """The factory of the size this call asks for; None: the default one."""
        raw = _headers(ctx).get(MEMORY_HEADER)
        if raw is None:
            return None
        if not raw.isdigit() or int(raw) < 1:
            raise SizeRefused(f"{MEMORY_HEADER} must be a whole number of MiB, not {raw!r}")
        size = int(raw)
        if size > self.cap_mb:
            raise SizeRefused(
                f"{MEMORY_HEADER}: a sandbox of {size} MiB was asked for; this server's sandboxes may have at most "
                f"{self.cap_mb} MiB (its --max-session-memory-mb)"
            )
        if size == self.default_mb:
            return None
        return lambda key: self.factory(key, size)


@dataclass(frozen=True, slots=True)
class Identity:
    """Which session one call runs in."""

    key: str
    owner: str
    """Whom the call is for (the owner header, when its signature holds; else anonymous): the session's
    owner when this call starts it, whose session limit it counts against."""
    handle: bool = False
    """Named by a session handle (answered back in `structuredContent`)."""
    minted: bool = False
    """The handle was minted by this call: its text says so."""
    once: bool = False
    """A call with no session: its state ends with the call."""


Errors = tuple[type[Exception], ...]
Work = Callable[[str, S], Awaitable[T]]
"""A tool's operation: given the session's key and state, what the call answers."""


@dataclass(frozen=True, slots=True)
class Faults:
    """How a tool's backend failures become error results, so each tool names its exceptions, not the handling.

    `usage`: the caller's misuse, answered in the exception's own words. `unavailable`: our side broke (the
    sandbox could not start or answer): "<what> unavailable: ..."; counted as the call's `error`, not a
    `tool_error`. `gone`: the session's sandbox stopped; the session is closed, and the error says what it lost
    and that the next call starts afresh. `lost`: what carries the state died but the sandbox can be replaced;
    the session gets a fresh state from the factory and the call is answered with the reset notice."""

    what: str
    """The backend in the caller's words: "sandbox", "container"."""
    usage: Errors = ()
    unavailable: Errors = ()
    gone: Errors = ()
    lost: Errors = ()
    loses: str = "files"
    """What a session loses with its state ("variables and files")."""
    dies: str = "the process"
    """What a `lost` fault killed, as the reset notice names it ("the Python process")."""
    redo: str = "Re-run earlier calls if needed"
    died_event: str = "session.lost"
    """The WARNING event logged when a `lost` fault replaces a session's state."""

    def gone_words(self, exc: Exception) -> str:
        return f"{exc}; its {self.loses} are lost and the next call starts a fresh {self.what}"

    def reset_words(self, exc: Exception) -> str:
        return f"[{self.dies} died ({exc}); the session was reset: all {self.loses} are lost. {self.redo}]"


@dataclass(frozen=True, slots=True)
class Reply:
    """What one operation answers; `ToolServer.answer` puts the session's notice before `text` and its handle
    into `data` (the `structuredContent`)."""

    text: str
    data: dict[str, Any] | None = None
    more: list[ContentBlock] = field(default_factory=list)
    """Content after the text (a run's images)."""


def _headers(ctx: Context) -> Mapping[str, str]:
    return getattr(ctx.request_context.request, "headers", None) or {}


def _without_handle(tool: Any) -> Any:
    schema = handles.without_argument(tool.input_schema)
    return tool if schema is tool.input_schema else tool.model_copy(update={"input_schema": schema})


class _ToldByToolCall(logging.Filter):
    """Drops the SDK's INFO line for a tool's `ToolError` ("Tool %r failed"): the call's `tool.call` line already
    says it, outcome and words, and a second line through the stdlib was a tenth of a refused call's work."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Tool %r failed: %r"


_TOLD = _ToldByToolCall()


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
        sizing: Sizing[S] | None = None,
        runtime: ContainerRuntime | None = None,
    ) -> None:
        self.mcp = mcp
        logging.getLogger(MCPServer.__module__).addFilter(_TOLD)  # once per process: a filter is added once
        self.runtime = runtime
        """The sandboxes' runtime, where the tool runs docker sandboxes: counted in /metrics."""
        self.sizing = sizing
        self.namespace = mcp.name
        self.settings = settings
        self.metrics = ToolMetrics(self.namespace)
        if runtime is not None:
            self.metrics.count_sandboxes(runtime)
        self.sessions: SessionRegistry[S] = SessionRegistry(
            session_factory,
            ttl_s=settings.session_ttl_s,
            max_sessions=settings.max_sessions,
            max_per_owner=settings.max_sessions_per_owner,
        )
        fleet_secret()  # read (or made) now, not on the event loop by the first call
        self.loops = Loops()
        self.drain = Drain(
            holds=self.sessions.__contains__,
            sessions=self.sessions.__len__,
            room=lambda: settings.max_sessions - len(self.sessions),
        )
        self.sessions.on_change = self._sessions_changed
        self.handles = Handles(self.namespace)
        self._minted: set[str] = set()
        self._lifespan = lifespan
        self._progress_interval_s = progress_interval_s
        mcp.add_tool(
            self._cleanup_session,
            name="cleanup_session",
            meta=HIDDEN,
            description="Free everything this session (or the session of `session_handle`) holds on the server.",
        )

    def _sessions_changed(self, count: int) -> None:
        self.metrics.sessions.set(count)
        self.drain.changed()

    async def _cleanup_session(self, ctx: Context, session_handle: str | None = None) -> str:
        if session_handle == handles.NEW:
            raise BadHandle(f"cleanup_session ends a session: pass its handle, not {handles.NEW!r}")
        async with self.observed("cleanup_session", ctx, session_handle) as who:
            freed = not who.once and await self.sessions.close(who.key)
        if who.once:
            return "this call names no session (no x-session-id, MCP session or session_handle): nothing to clean up"
        return f"session {who.key} cleaned up" if freed else f"session {who.key} held nothing"

    def identify(self, ctx: Context, handle: str | None) -> Identity:
        """The session a call runs in: `x-session-id`, else its handle, else its 2025-era MCP session; a call
        with none of them gets a session of its own that ends with it (see the README's "MCP protocol eras")."""
        key = session_key(ctx)
        owner = read_owner(_headers(ctx).get(OWNER_HEADER))
        if handle is None:
            return Identity(key, owner) if key is not None else Identity(f"once-{uuid.uuid4().hex}", owner, once=True)
        if _headers(ctx).get(SESSION_HEADER) is not None:
            raise BadHandle("this call names its session by x-session-id; session_handle is for clients without one")
        if handle == handles.NEW:
            return Identity(self.handles.mint(), owner, handle=True, minted=True)
        self.handles.check(handle)
        return Identity(handle, owner, handle=True)

    @contextlib.asynccontextmanager
    async def observed(self, tool: str, ctx: Context, handle: str | None = None) -> AsyncIterator[Identity]:
        """One `tool.call` log event, span and the metrics for a call, yielding the call's session (a session
        that cannot be told is the call's error). The outcome is set by what escapes; the span continues the
        trace the caller (the gateway) sent in the MCP request's headers."""
        start = time.perf_counter()
        outcome = "error"
        told: dict[str, str] = {}  # a refusal's words, on the call's line (the SDK's own line for it is dropped)
        who: Identity | ToolError
        try:
            who = self.identify(ctx, handle)
        except ToolError as exc:
            who = exc
        key, owner = (who.key, who.owner) if isinstance(who, Identity) else (None, None)
        ids = {"namespace": self.namespace, "session_id": key, "tool": tool, "owner": owner}
        parent = extract(_headers(ctx))
        with (
            request_context(_headers(ctx).get(REQUEST_ID_HEADER), **ids),
            span(
                f"{self.namespace}.{tool}", kind=SpanKind.SERVER, parent=parent, expected=(ToolError,), **ids
            ) as current,
        ):
            try:
                if isinstance(who, ToolError):
                    raise who
                yield who
                outcome = "ok"
            except ToolError as exc:
                outcome = "tool_error"  # the caller's misuse or a sandbox refusal, answered as an error result
                told["error"] = str(exc)
                raise
            finally:
                elapsed = time.perf_counter() - start
                self.metrics.observe(tool, outcome, elapsed)
                annotate(current, outcome=outcome)
                log.info("tool.call", ms=round(elapsed * 1000, 2), outcome=outcome, **told)

    @contextlib.asynccontextmanager
    async def session(self, ctx: Context, tool: str, handle: str | None = None) -> AsyncIterator[tuple[str, S]]:
        """The caller's session state for the length of one call, with heartbeats for long calls. A call that
        names no session runs in one of its own, freed (sandbox and all) as the call ends."""
        async with self.observed(tool, ctx, handle) as who:
            state = await self._acquire(who, self.factory(ctx))
            try:
                async with self._heartbeat(ctx):
                    yield who.key, state
            finally:
                self.sessions.release(who.key)
                self._minted.discard(who.key)
                if who.once:
                    await self.sessions.close(who.key)

    async def call(
        self,
        ctx: Context,
        tool: str,
        handle: str | None,
        work: Work[S, T],
        faults: Faults,
        *,
        step: str | None = None,
        reset: Callable[[str, str], T] | None = None,
    ) -> T:
        """Run `work(key, state)` in the caller's session (inside a span `step`, where named), turning the
        backend's failures into error results as `faults` says. A `lost` state is replaced and the call answered
        by `reset(key, notice)` (without `reset`: the notice is the call's error)."""
        try:
            async with self.session(ctx, tool, handle) as (key, state):
                try:
                    with contextlib.nullcontext() if step is None else self._step(step, tool, key):
                        return await work(key, state)
                except faults.usage as exc:
                    raise ToolError(str(exc)) from exc
                except faults.gone as exc:
                    await self.sessions.close(key)
                    raise ToolError(faults.gone_words(exc)) from exc
                except faults.lost as exc:
                    await self._replace(ctx, key, exc, faults)
                    if reset is None:
                        raise ToolError(faults.reset_words(exc)) from exc
                    return reset(key, faults.reset_words(exc))
        except faults.unavailable as exc:
            raise ToolError(f"{faults.what} unavailable: {exc}") from exc

    def tool(
        self,
        name: str,
        faults: Faults,
        *,
        step: str | None = None,
        description: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Callable[[Body], Body]:
        """`@kit.tool(name, faults)`: register a tool whose body states only its operation. The body checks its
        arguments and returns an `Op` on the session's state; the kit adds the rest, named once: the
        `session_handle` argument, the session, the span `step`, the fault handling and, for an operation that
        answers a `Reply`, the notice and the handle (`answer`). The body runs before the session is taken, so
        an argument it refuses starts no sandbox."""

        def register(body: Body) -> Body:
            shape = ToolSignature.of(body)
            replies = shape.answer is Reply

            async def tool(ctx: Context, session_handle: str | None = None, **arguments: Any) -> Any:
                op = body(**arguments, ctx=ctx) if shape.takes_context else body(**arguments)

                def work(_key: str, state: S) -> Awaitable[Any]:
                    return op(state)

                if replies:
                    return await self.answer(ctx, name, session_handle, work, faults, step)
                return await self.call(ctx, name, session_handle, work, faults, step=step)

            shape.dress(tool, returns=CallToolResult if replies else shape.answer)
            structured = False if replies else None  # a `Reply` is text; its data goes into `structuredContent`
            self.mcp.add_tool(tool, name=name, description=description, meta=meta, structured_output=structured)
            return body

        return register

    async def answer(
        self, ctx: Context, tool: str, handle: str | None, work: Work[S, Reply], faults: Faults, step: str | None = None
    ) -> CallToolResult:
        """`call` for a tool that answers text: the session's notice comes first, its handle goes into
        `structuredContent`."""

        async def replied(key: str, state: S) -> CallToolResult:
            return self._result(key, await work(key, state))

        return await self.call(
            ctx, tool, handle, replied, faults, step=step, reset=lambda key, words: self._result(key, Reply(words))
        )

    def _result(self, key: str, reply: Reply) -> CallToolResult:
        text = TextContent(type="text", text=self.notice(key) + reply.text)
        return CallToolResult(content=[text, *reply.more], structured_content=self.structured(key, reply.data))

    def _step(self, name: str, tool: str, key: str) -> contextlib.AbstractContextManager[Any]:
        return span(name, namespace=self.namespace, tool=tool, session_id=key)

    async def _replace(self, ctx: Context, key: str, exc: Exception, faults: Faults) -> None:
        """Give the session a fresh state (of the size the call asks for) after a `lost` fault; if none can
        start, the session ends and the call says why."""
        log.warning(faults.died_event, reason=str(exc))
        try:
            await self.sessions.replace(key, await self.factory(ctx)(key))
        except faults.unavailable as start_exc:
            await self.sessions.close(key)
            raise ToolError(f"{faults.dies} died ({exc}) and a new one could not start: {start_exc}") from exc

    def factory(self, ctx: Context) -> Callable[[str], Awaitable[S]]:
        """What starts this call's session: of the size it asks for, where the server sizes sandboxes (an
        existing session keeps the size it was started with)."""
        sized = self.sizing.factory_for(ctx) if self.sizing is not None else None
        return sized or self.sessions.factory

    async def _acquire(self, who: Identity, factory: Callable[[str], Awaitable[S]]) -> S:
        """The state of `who`; only a new handle, never a known one, may create it."""
        try:
            state = await self.sessions.acquire(
                who.key, owner=who.owner, create=who.minted or not who.handle, factory=factory
            )
        except TooManySessions as exc:
            raise ToolError(str(exc)) from exc
        except SessionGone as exc:
            gone = self.sessions.gone_reason(who.key)
            why = f"was {gone}" if gone is not None else "was ended or expired"
            raise BadHandle(
                f"session handle {who.key!r} {why} (an idle handle lives {self.idle_lifetime}); its state is gone: "
                f"pass {handles.NEW!r} to start a new session"
            ) from exc
        if who.minted:
            self._minted.add(who.key)
        return state

    @property
    def idle_lifetime(self) -> str:
        return idle_words(self.settings.session_ttl_s)

    def notice(self, key: str) -> str:
        """The lines the model reads first: that this session's state went since its last call, and why (so a
        fresh state is never mistaken for the old one), or the handle this call minted."""
        text = ""
        if (reason := self.sessions.take_reset(key)) is not None:
            text = f"[this session's state was {reason}: everything earlier calls made in it is gone]\n"
        if key in self._minted:
            text += (
                f"[session handle: {key} - pass it as {handles.ARGUMENT} to keep this session's state; "
                f"cleanup_session with it ends the session, and it expires after {self.idle_lifetime} idle]\n"
            )
        return text

    def structured(self, key: str, data: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """A call's `structuredContent`, with the session's handle when a handle names it."""
        if not self.handles.owns(key):
            return data
        return {**(data or {}), handles.ARGUMENT: key}

    def _declare_handles(self) -> None:
        """Every tool that takes `session_handle` declares it for `Mcp-Param-*` (the spec's `x-mcp-header`)
        and says how long an idle handle lives; done once all tools (and their final schemas) are registered."""
        prop = {
            "type": "string",
            "x-mcp-header": handles.HEADER_TOKEN,
            "description": (
                f"Only for clients without x-session-id that want state across calls: {handles.NEW!r} starts "
                "a session and the answer gives its handle (in structuredContent and the text); pass that handle "
                f"in later calls. An idle handle lives {self.idle_lifetime}. Without it a call keeps no state."
            ),
        }
        for tool in self.mcp._tool_manager.list_tools():  # the SDK exposes registered tools only this way
            if handles.ARGUMENT in inspect.signature(tool.fn).parameters:
                properties = {**tool.parameters.get("properties", {}), handles.ARGUMENT: prop}
                tool.parameters = {**tool.parameters, "properties": properties}
        lowlevel = self.mcp._lowlevel_server  # the SDK exposes the low-level server only this way
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

    def _heartbeat(self, ctx: Context) -> contextlib.AbstractAsyncContextManager[None]:
        """Progress every few seconds for a caller that asked for it (`_meta.progressToken`), so SSE clients
        (vLLM gives up after 300 s of silence) wait. A call without a token can be sent no progress (the SDK
        drops it), so it runs without a heartbeat task: most calls, and those are answered as one JSON body."""
        if progress_token_from_params(ctx.request_context.params) is None:
            return contextlib.nullcontext()
        return self._beating(ctx)

    @contextlib.asynccontextmanager
    async def _beating(self, ctx: Context) -> AsyncIterator[None]:
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._beat, ctx)
            try:
                yield
            except Exception as exc:  # raised below, outside the group, so it is not wrapped
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _beat(self, ctx: Context) -> None:
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

    def build_app(self) -> Front:
        """`/sse` + `/messages/`, `/mcp`, `/healthz`, `/metrics` behind `Front` (whose `drain` `toolkit.serve`
        runs on SIGTERM); the lifespan runs the backend and reaper."""
        self._declare_handles()
        security = self._security()
        limit = self.settings.max_body_bytes
        sse = SseServerTransport("/messages/", security_settings=security, max_request_body_size=limit)
        lowlevel = self.mcp._lowlevel_server  # the SDK exposes the low-level server only this way

        async def handle_sse(request: Request) -> Response:
            async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
            return Response()

        manager = SingleAnswerSessionManager(lowlevel, security_settings=security, max_request_body_size=limit)

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with contextlib.AsyncExitStack() as stack:
                if self._lifespan is not None:
                    await stack.enter_async_context(self._lifespan())
                await stack.enter_async_context(manager.run())
                tg = await stack.enter_async_context(anyio.create_task_group())
                self.loops.start(tg, "reaper", self.sessions.reap_forever, self.settings.reap_interval_s)
                if self.runtime is not None and self.runtime.samples_memory:
                    self.loops.start(tg, "memory-sampler", self.runtime.sample_memory_forever)
                log.info("server.started", namespace=self.namespace, port=self.settings.port)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
                    with anyio.CancelScope(shield=True):
                        await self.sessions.close_all()
                    log.info("server.stopped", namespace=self.namespace)

        async def healthz(request: Request) -> Response:  # alive: the reaper still runs (a drain is alive too)
            status, body = self.loops.health()
            extra = {"namespace": self.namespace, "sessions": len(self.sessions), "draining": self.drain.draining}
            return JSONResponse(body | extra, status)

        async def readyz(request: Request) -> Response:  # ready for new sessions: alive and not draining
            status, body = self.loops.health()
            if status == 200 and self.drain.draining:
                status, body = 503, {"status": "draining"}
            return JSONResponse(body | {"namespace": self.namespace}, status)

        mcp = StreamableHTTPASGIApp(manager)
        rest = Starlette(
            routes=[
                Route("/sse", handle_sse, methods=["GET"]),
                Mount("/messages/", app=sse.handle_post_message),
                Route("/mcp", mcp, methods=sorted(MCP_METHODS)),  # what Front passes on here is a 405
                Route("/healthz", healthz),
                Route("/readyz", readyz),
                Route("/metrics", self.metrics.endpoint),
            ],
            lifespan=lifespan,
        )
        app = Front(mcp=mcp, rest=rest, drain=self.drain, moved=self.sessions.moved_here, rpc_paths=RPC_PATHS)
        return app
