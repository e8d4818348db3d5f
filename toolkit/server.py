"""The tool-server kit: one MCP server served as legacy SSE (`/sse`) and streamable HTTP (`/mcp`).

Every tool server (python, browser, container) is an `MCPServer` named by its namespace plus a
`ToolServer` that owns its sessions, its hidden `cleanup_session` tool, metrics and the ASGI app.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ContentBlock, TextContent
from opentelemetry.trace import SpanKind

from toolkit import app, handles
from toolkit.callers import Callers, Identity, headers
from toolkit.drain import Drain
from toolkit.front import Front
from toolkit.handles import BadHandle, Handles
from toolkit.loops import Loops
from toolkit.metrics import ToolMetrics
from toolkit.progress import heartbeat
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sessions import S, SessionRegistry
from toolkit.settings import ToolServerSettings
from toolkit.signature import Body, ToolSignature
from toolkit.snapshots.autosave import Autosave
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.task_counts import running_counts
from toolkit.tasks import Tasks, TaskStore, cancelled_task
from toolkit.tracing import annotate, extract, request_context, span
from toolkit.wire import MEMORY_HEADER, REQUEST_ID_HEADER, fleet_secret, size_refusal

log = structlog.get_logger(__name__)
T = TypeVar("T")

TASK_POLL_MS = 1000
"""How often a task's caller is asked to poll `tasks/get`."""
HIDDEN = {"include_in_prompt": False}
"""Tool `_meta` that tells vLLM to leave a tool out of the model's prompt."""


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
        raw = headers(ctx).get(MEMORY_HEADER)
        if raw is None:
            return None
        if not raw.isdigit() or int(raw) < 1:
            raise SizeRefused(f"{MEMORY_HEADER} must be a whole number of MiB, not {raw!r}")
        size = int(raw)
        if size > self.cap_mb:
            raise SizeRefused(size_refusal(size, self.cap_mb))
        if size == self.default_mb:
            return None
        return lambda key: self.factory(key, size)


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


class _ToldByToolCall(logging.Filter):
    """Drops the SDK's INFO line for a tool's `ToolError` ("Tool %r failed"): the call's `tool.call` line already
    says it, outcome and words, and a second line through the stdlib was a tenth of a refused call's work."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Tool %r failed: %r"


_TOLD = _ToldByToolCall()


def _kept_by(
    sessions: SessionRegistry[S], metrics: ToolMetrics, keeper: SnapshotKeeper | None
) -> SnapshotKeeper | None:
    """Sessions saved by `keeper`, counted in /metrics, and saved in the background after calls where its
    `every_s` > 0 (the app runs `Autosave.run`)."""
    sessions.keeper = keeper
    if keeper is not None:
        keeper.observer = metrics.count_snapshots()
        if keeper.every_s > 0:
            sessions.autosave = Autosave(keeper.every_s, sessions.save_in_background)
    return keeper


def _tasks(settings: ToolServerSettings) -> TaskStore:
    """The replica's MCP tasks, its instance id new at each start, their owners counted where configured."""
    counts = running_counts(settings.task_counts_url)
    return TaskStore(secrets.token_hex(8), settings.task_ttl_s, settings.max_tasks_per_owner, TASK_POLL_MS, counts)


def _drain(sessions: SessionRegistry[S], max_sessions: int, keeper: SnapshotKeeper | None, tasks: TaskStore) -> Drain:
    """The replica's drain: with a snapshot store, it hands its sessions over to other replicas as it goes; it
    waits for the MCP tasks too."""
    drain = Drain(
        holds=sessions.__contains__,
        sessions=sessions.__len__,
        room=lambda: max_sessions - len(sessions),
        hand_over=sessions.hand_over if keeper is not None and keeper.store.enabled else None,
        instance=tasks.instance,
        tasks=tasks,
    )
    tasks.on_end = drain.changed
    return drain


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
        keeper: SnapshotKeeper | None = None,
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
        self.keeper = _kept_by(self.sessions, self.metrics, keeper)
        """Saves sessions as they go and restores them (`--snapshots`); None: a session's state ends with it."""
        self._reads: set[str] = set()  # tools that never change a session's state: they arm no background save
        fleet_secret()  # read (or made) now, not on the event loop by the first call
        self.loops = Loops()
        self.tasks = _tasks(settings)
        self._long: list[str] = []  # the tools that run as MCP tasks for a client that declared the extension
        self.drain = _drain(self.sessions, settings.max_sessions, keeper, self.tasks)
        self.sessions.on_change = self._sessions_changed
        self.callers = Callers(self.sessions, Handles(self.namespace), settings.session_ttl_s, keeper)
        self.backend = lifespan
        """What runs the backend while the app does (`backend_lifespan`)."""
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
            freed = not who.once and await self.end_session(who.key, who.owner)
        if who.once:
            return "this call names no session (no x-session-id, MCP session or session_handle): nothing to clean up"
        return f"session {who.key} cleaned up" if freed else f"session {who.key} held nothing"

    async def end_session(self, key: str, owner: str | None = None) -> bool:
        """End a session on purpose (`cleanup_session`, or an operator through `toolkit.admin`): its sandbox is
        closed and its snapshot forgotten; True when it was held. `owner` None: the held session's own."""
        owner = owner or self.sessions.owner_of(key)
        freed = await self.sessions.close(key)
        if self.keeper is not None and owner is not None:
            await self.keeper.forget(key, owner)
        return freed

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
            who = self.callers.identify(ctx, handle)
        except ToolError as exc:
            who = exc
        key, owner = (who.key, who.owner) if isinstance(who, Identity) else (None, None)
        ids = {"namespace": self.namespace, "session_id": key, "tool": tool, "owner": owner}
        parent = extract(headers(ctx))
        with (
            request_context(headers(ctx).get(REQUEST_ID_HEADER), **ids),
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
            state = await self.callers.acquire(who, self.factory(ctx))
            try:
                async with heartbeat(ctx, self._progress_interval_s):
                    yield who.key, state
            finally:
                await self.callers.release(who, changed=tool not in self._reads)

                if cancelled_task():  # the code it runs cannot be stopped otherwise: its sandbox goes
                    await self.sessions.close(who.key)
                await self.callers.release(who)

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
        reads: bool = False,
        runs_long: bool = False,
    ) -> Callable[[Body], Body]:
        """`@kit.tool(name, faults)`: register a tool whose body states only its operation. The body checks its
        arguments and returns an `Op` on the session's state; the kit adds the rest, named once: the
        `session_handle` argument, the session, the span `step`, the fault handling and, for an operation that
        answers a `Reply`, the notice and the handle (`answer`). The body runs before the session is taken, so
        an argument it refuses starts no sandbox. A tool that only `reads` the session arms no background save; a
        tool that `runs_long` is called as an MCP task by a client that declared the tasks extension
        (`toolkit.tasks`)."""
        if reads:
            self._reads.add(name)

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
            if runs_long:
                self._long.append(name)
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
        text = TextContent(type="text", text=self.callers.notice(key) + reply.text)
        structured = self.callers.structured(key, reply.data)
        return CallToolResult(content=[text, *reply.more], structured_content=structured)

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

    def build_app(self) -> Front:
        """The server's ASGI app (`toolkit.app`), serving MCP tasks for the tools that run long."""
        if self._long:
            tasks = Tasks(self.tasks, long=self._long)
            # The SDK takes extensions at construction, and the kit is handed a built server: apply it the way
            # the constructor does.
            self.mcp._apply_extension(tasks)
            self.mcp._install_extension_interceptor()
        return app.build_app(self)
