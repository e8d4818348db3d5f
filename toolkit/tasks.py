"""MCP Tasks (the 2026-07-28 `io.modelcontextprotocol/tasks` extension, SEP-2663) for every tool server.

A call to a tool that declares it may run long, from a client that declared the extension, is answered at once
with a task (`resultType: "task"`); the call goes on in the server's own task group, outliving the HTTP request,
and the client polls `tasks/get` for its status and, once it ends, its inlined result, or stops it with
`tasks/cancel`. Task ids are sealed for their owner and carry this replica's instance id (`toolkit.wire`), so
the gateway routes them without a lookup and an id of another owner reads exactly as an unknown one. Tasks are
bounded per owner; a task is kept `ttl_s` from its creation and then removed, its work cancelled if it still
runs; an owner at its limit gets the place of its oldest task whose end it already read (as a session past
its owner's limit evicts that owner's idle one). Cancelling reaches the sandbox: the call's session is closed
(`ToolServer.call`), killing the process.

A client may set the fleet's own `inlineWithinMs` in its declaration of the extension (the orchestrator does):
a call that ends within that time is answered inline, as without the extension, and only a longer one becomes
a task (the spec leaves whether to make a task to the server, per request).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, Field

from toolkit.wire import OWNER_HEADER, read_owner, seal_task, task_instance, unknown_task

log = structlog.get_logger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


@dataclass(eq=False)
class Task:
    """One task: its status and, once it ended, its result or its error."""

    id: str
    owner: str
    tool: str
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.monotonic)
    status: str = "working"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ended: anyio.Event = field(default_factory=anyio.Event)
    delivered: bool = False
    """Its end (result, error or cancel) was read by its caller through `tasks/get`."""

    def settle(self, status: str, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.status, self.result, self.error = status, result, error
        self.updated = datetime.now(UTC)


CURRENT_TASK: ContextVar[Task | None] = ContextVar("toolfleet_task", default=None)
"""The task the current call runs as, if any: a call cancelled as its task was ends its session."""


def cancelled_task() -> bool:
    """Whether the current call runs as a task that was cancelled (or expired): its sandbox must be killed."""
    task = CURRENT_TASK.get()
    return task is not None and task.status == "cancelled"


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _unknown(task_id: object) -> MCPError:
    return MCPError(INVALID_PARAMS, unknown_task(task_id))


class TaskStore:
    """This replica's tasks: made, run in the store's own task group, read, cancelled, expired."""

    def __init__(self, instance: str, ttl_s: float, max_per_owner: int, poll_ms: int) -> None:
        self.instance = instance
        self.ttl_s = ttl_s
        self.max_per_owner = max_per_owner
        self.poll_ms = poll_ms
        self._tasks: dict[str, Task] = {}
        self._tg: TaskGroup | None = None

    def __len__(self) -> int:
        return len(self._tasks)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Tasks run while the server does; at its stop every task still working is cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._expire_forever)
            try:
                yield
            finally:
                self._tg = None
                for task in self._tasks.values():
                    self._cancel(task, "the server stopped")
                tg.cancel_scope.cancel()

    def create(self, owner: str, tool: str, work: Callable[[], Awaitable[HandlerResult]]) -> Task:
        """A new task running `work`; refused when the owner holds its limit or the server is not running."""
        if self._tg is None:
            raise MCPError(INTERNAL_ERROR, "this tool server is stopping: it starts no task")
        held = sum(1 for t in self._tasks.values() if t.owner == owner)
        if held >= self.max_per_owner and (spent := self._delivered(owner)) is not None:
            del self._tasks[spent.id]  # its caller has its end: the owner's new task takes its place
            held -= 1
        if held >= self.max_per_owner:
            raise MCPError(
                INVALID_PARAMS,
                f"this caller holds {held} tasks on this replica, its limit: wait for one to end and its ttl "
                f"({self.ttl_s:g} s) to pass, or cancel one",
            )
        task = Task(seal_task(self.instance, owner), owner, tool)
        self._tasks[task.id] = task
        self._tg.start_soon(self._run, task, work)
        log.info("task.created", task_id=task.id, tool=tool, owner=owner)
        return task

    async def _run(self, task: Task, work: Callable[[], Awaitable[HandlerResult]]) -> None:
        CURRENT_TASK.set(task)
        with task.scope:
            try:
                task.settle("completed", result=_dump(await work()))
            except MCPError as exc:
                task.settle("failed", error=exc.error.model_dump(mode="json", exclude_none=True))
            except Exception as exc:
                log.exception("task.failed", task_id=task.id)
                task.settle("failed", error={"code": INTERNAL_ERROR, "message": f"the tool call failed: {exc}"})
        task.ended.set()
        log.info("task.ended", task_id=task.id, status=task.status)

    async def inline(self, task: Task, within_s: float) -> HandlerResult | None:
        """The task's result when it ends within `within_s` (the task is then forgotten: its caller never
        heard of it), else None. A caller gone before then never learns the id: the task is cancelled."""
        try:
            with anyio.move_on_after(within_s):
                await task.ended.wait()
        except anyio.get_cancelled_exc_class():
            self._cancel(task, "its caller went away before it became a task")
            raise
        if not task.ended.is_set():
            return None
        del self._tasks[task.id]
        if task.error is not None:
            raise MCPError(int(task.error.get("code", INTERNAL_ERROR)), str(task.error.get("message")))
        return task.result

    def _delivered(self, owner: str) -> Task | None:
        """The owner's oldest task whose end its caller already read, if any."""
        return min(
            (t for t in self._tasks.values() if t.owner == owner and t.delivered), key=lambda t: t.started, default=None
        )

    def get(self, task_id: str, owner: str) -> Task:
        """The owner's task of that id; any other id gets the one refusal (`unknown_task`)."""
        task = self._tasks.get(task_id) if task_instance(task_id, owner) == self.instance else None
        if task is None or task.owner != owner or self._expired(task):
            raise _unknown(task_id)
        return task

    def cancel(self, task_id: str, owner: str) -> None:
        self._cancel(self.get(task_id, owner), "cancelled by its caller")

    @staticmethod
    def _cancel(task: Task, why: str) -> None:
        if task.status not in TERMINAL:
            task.settle("cancelled", error={"code": INTERNAL_ERROR, "message": why})
            task.scope.cancel()
            log.info("task.cancelled", task_id=task.id, why=why)

    def _expired(self, task: Task) -> bool:
        return time.monotonic() - task.started >= self.ttl_s

    def expire(self) -> int:
        """Remove the tasks whose ttl passed, cancelling the work of any still running."""
        gone = [t for t in self._tasks.values() if self._expired(t)]
        for task in gone:
            self._cancel(task, f"its ttl ({self.ttl_s:g} s) passed")
            del self._tasks[task.id]
        return len(gone)

    async def _expire_forever(self) -> None:
        while True:
            await anyio.sleep(min(self.ttl_s, 30.0))
            if removed := self.expire():
                log.info("tasks.expired", count=removed)

    def detailed(self, task: Task) -> dict[str, Any]:
        """`tasks/get`'s answer: the task, with its result (completed) or error (failed) inlined."""
        body = self.envelope(task)
        if task.status == "working":
            body["statusMessage"] = f"running for {time.monotonic() - task.started:.0f} s"
        task.delivered = task.status in TERMINAL
        if task.status == "completed":
            body["result"] = task.result
        elif task.status == "failed":
            body["error"] = task.error
        return body | {"resultType": "complete"}

    def envelope(self, task: Task) -> dict[str, Any]:
        return {
            "taskId": task.id,
            "status": task.status,
            "createdAt": _stamp(task.created),
            "lastUpdatedAt": _stamp(task.updated),
            "ttlMs": int(self.ttl_s * 1000),
            "pollIntervalMs": self.poll_ms,
        }


def _dump(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result) if isinstance(result, dict) else {"value": result}


def _headers(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, str]:
    return getattr(ctx.request, "headers", None) or {}


def _owner(ctx: ServerRequestContext[Any, Any]) -> str:
    return read_owner(_headers(ctx).get(OWNER_HEADER))


def _checked(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> str:
    """The caller of a `tasks/*` request, once it declared the extension and its `Mcp-Name` header (where sent)
    names the task its body does (SEP-2663's routing header, which an intermediary may have routed by)."""
    require_client_extension(ctx, EXTENSION)
    if (name := _headers(ctx).get("mcp-name")) is not None and name != params.task_id:
        raise MCPError(HEADER_MISMATCH, "the Mcp-Name header does not match params.taskId")
    return _owner(ctx)


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


def _inline_s(ctx: ServerRequestContext[Any, Any]) -> float:
    """How long the client asked a call to be awaited before it becomes a task (`inlineWithinMs`; 0: none)."""
    capabilities = ctx.session.client_capabilities
    settings = (capabilities.extensions or {}).get(EXTENSION) if capabilities else None
    ms = settings.get("inlineWithinMs") if isinstance(settings, dict) else None
    return min(float(ms), 600_000.0) / 1000 if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0 else 0.0


class Tasks(Extension):
    """The extension: `tasks/get`, `tasks/update`, `tasks/cancel`, and `tools/call` of a long tool as a task."""

    identifier = EXTENSION

    def __init__(self, store: TaskStore, *, long: Sequence[str] = (), required: Sequence[str] = ()) -> None:
        self.store = store
        self.long = set(long) | set(required)
        """Tools that run as a task for a client that declared the extension."""
        self.required = set(required)
        """Tools that run only as a task: a client without the extension is refused (-32021)."""

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in self.long:
            return await call_next(ctx)
        if params.name in self.required:
            require_client_extension(ctx, EXTENSION)
        elif not _declared(ctx):
            return await call_next(ctx)
        task = self.store.create(_owner(ctx), params.name, lambda: call_next(ctx))
        if (within := _inline_s(ctx)) and (result := await self.store.inline(task, within)) is not None:
            return result
        return self.store.envelope(task) | {"resultType": "task"}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        return self.store.detailed(self.store.get(params.task_id, _checked(ctx, params)))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
        """No tool of ours asks its caller for input mid-task, so no task is ever `input_required`."""
        task = self.store.get(params.task_id, _checked(ctx, params))
        raise MCPError(INVALID_PARAMS, f"task {task.id!r} is {task.status}, not input_required: it takes no input")

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        self.store.cancel(params.task_id, _checked(ctx, params))
        return {"resultType": "complete"}
