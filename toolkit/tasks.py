"""MCP Tasks (the 2026-07-28 `io.modelcontextprotocol/tasks` extension, SEP-2663) for every tool server.

A call to a tool that declares it may run long, from a client that declared the extension, is answered at once
with a task (`resultType: "task"`); the call goes on in the server's own task group, outliving the HTTP request,
and the client polls `tasks/get` for its status and, once it ends, its inlined result, or stops it with
`tasks/cancel`. Task ids are sealed for their owner and carry this replica's instance id (`toolkit.wire`), so
the gateway routes them without a lookup and an id of another owner reads exactly as an unknown one. An owner
runs a bounded number of tasks at once (`toolkit.task_counts`: per replica, or across the fleet); a task is kept
`ttl_s` from its creation and then removed, its work cancelled if it still runs. Cancelling reaches the sandbox:
the call's session is closed (`ToolServer.call`), killing the process.

A task may ask its client for input mid-run (`ask`): it reads `input_required`, with the pending requests
inlined on `tasks/get`, until `tasks/update` answers them (one at a time or together). A tool that gathers its
input first, in SEP-2322 rounds answered at once (`Resolve`/`Elicit`), is a "gathering" tool: its call becomes a
task only when it says it has what it needs (`escalate`), so its input rounds never carry a task id.

A client may set the fleet's own `inlineWithinMs` in its declaration of the extension (the orchestrator does):
a call that ends within that time is answered inline, as without the extension, and only a longer one becomes
a task (the spec leaves whether to make a task to the server, per request).
"""

from __future__ import annotations

import contextlib
import math
import secrets
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
from mcp_types import CallToolRequestParams, ClientCapabilities, RequestParams
from mcp_types.jsonrpc import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from pydantic import BaseModel, Field

from toolkit.drain import DRAINED_CODE, DRAINED_WORDS
from toolkit.task_counts import LEASE_S, ReplicaCounts, RunningCounts
from toolkit.wire import OWNER_HEADER, read_owner, seal_task, task_instance, unknown_task

log = structlog.get_logger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
ASKABLE = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}
"""The requests a task may ask its client, each with the client capability it needs."""


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


@dataclass(eq=False)
class _Asked:
    """One request a task put to its client, waiting for its answer."""

    request: dict[str, Any]
    answered: anyio.Event = field(default_factory=anyio.Event)
    response: Any = None


@dataclass(eq=False)
class Task:
    """One task: its status and, once it ended, its result or its error."""

    id: str
    owner: str
    tool: str
    can_answer: frozenset[str] = frozenset()
    """The client capabilities its creator declared: which requests `ask` may put to it."""
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.monotonic)
    status: str = "working"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    asked: dict[str, _Asked] = field(default_factory=dict)
    """Requests waiting for the client's `tasks/update`, by the key they were put under."""
    escalated: bool = False
    decided: anyio.Event = field(default_factory=anyio.Event)
    """Set when the work ended or escalated: what a gathering tool's call waits for."""
    told: anyio.Event = field(default_factory=anyio.Event)
    """Set once `tasks/get` read it ended: what a drain that failed it waits for."""

    def settle(self, status: str, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.status, self.result, self.error = status, result, error
        self.updated = datetime.now(UTC)

    def waits(self) -> None:
        """Its status follows its unanswered requests: `input_required` while any is left, else `working`."""
        if self.status not in TERMINAL:
            self.status = "input_required" if self.asked else "working"
            self.updated = datetime.now(UTC)


CURRENT_TASK: ContextVar[Task | None] = ContextVar("toolfleet_task", default=None)
"""The task the current call runs as, if any: a call cancelled as its task was ends its session."""


def cancelled_task() -> bool:
    """Whether the current call runs as a task whose work was stopped (cancelled, expired, or failed by a drain's
    deadline): its sandbox must be killed."""
    task = CURRENT_TASK.get()
    return task is not None and task.scope.cancel_called


def escalate() -> None:
    """Called by a gathering tool once its input rounds are over: its call is answered with a task from here on
    (and runs on as one). Outside a task it does nothing: the call simply goes on."""
    if (task := CURRENT_TASK.get()) is not None and not task.decided.is_set():
        task.escalated = True
        task.decided.set()


async def ask(method: str, params: Mapping[str, Any]) -> Any:
    """Put a request (`elicitation/create`, `sampling/createMessage`, `roots/list`) to the client of the task this
    call runs as, and wait for its answer: meanwhile the task reads `input_required` with the request among its
    `inputRequests`. Only a call running as a task can ask this way; a client that did not declare the
    capability the request needs is never asked."""
    task = CURRENT_TASK.get()
    if task is None or not task.escalated:
        raise MCPError(INVALID_REQUEST, f"{method} mid-call needs a task: this call does not run as one")
    if ASKABLE.get(method) not in task.can_answer:
        raise MCPError(INVALID_REQUEST, f"the client did not declare what {method} needs, so it cannot be asked")
    key = secrets.token_hex(8)
    asked = task.asked[key] = _Asked({"method": method, "params": dict(params)})
    task.waits()
    try:
        await asked.answered.wait()
    finally:
        task.asked.pop(key, None)
        task.waits()
    return asked.response


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _unknown(task_id: object) -> MCPError:
    return MCPError(INVALID_PARAMS, unknown_task(task_id))


class TaskStore:
    """This replica's tasks: made, run in the store's own task group, read, answered, cancelled, expired."""

    def __init__(
        self, instance: str, ttl_s: float, max_per_owner: int, poll_ms: int, counts: RunningCounts | None = None
    ) -> None:
        self.instance = instance
        self.ttl_s = ttl_s
        self.max_per_owner = max_per_owner
        self.poll_ms = poll_ms
        self.counts = counts or ReplicaCounts()
        self._tasks: dict[str, Task] = {}
        self._running: dict[str, Task] = {}
        self._tg: TaskGroup | None = None
        self.draining = False
        self.on_end: Callable[[], None] = lambda: None
        """Called as a task's work ends: a drain waiting for tasks looks again."""

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def working(self) -> int:
        """Tasks whose work still runs here (what a drain waits for)."""
        return len(self._running)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Tasks run while the server does; at its stop every task still working is cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._expire_forever)
            tg.start_soon(self._renew_forever)
            try:
                yield
            finally:
                self._tg = None
                for task in list(self._running.values()):
                    self._cancel(task, "the server stopped")
                tg.cancel_scope.cancel()

    def refuse_new(self) -> None:
        """Start no more tasks: a drain began (`toolkit.drain`)."""
        self.draining = True

    async def fail_working(self, why: str, told_within_s: float) -> int:
        """End every task still working as `failed` with `why` (its work cancelled, its sandbox's process killed),
        then wait, at most `told_within_s`, for each to be read once by `tasks/get`: its caller learns why."""
        ended = list(self._running.values())
        for task in ended:
            self._cancel(task, why, "failed")
        with anyio.move_on_after(told_within_s):
            for task in ended:
                await task.told.wait()
        return len(ended)

    async def create(
        self,
        owner: str,
        tool: str,
        work: Callable[[], Awaitable[HandlerResult]],
        *,
        published: bool = True,
        can_answer: frozenset[str] = frozenset(),
    ) -> Task:
        """A new task running `work`; refused when the owner runs its limit or the server is not running. An
        unpublished task (a gathering tool's call) is not found by its id until `publish`."""
        if self.draining:
            raise MCPError(DRAINED_CODE, DRAINED_WORDS)
        if (tg := self._tg) is None:
            raise MCPError(INTERNAL_ERROR, "this tool server is stopping: it starts no task")
        task = Task(seal_task(self.instance, owner), owner, tool, can_answer, escalated=published)
        try:
            held = await self.counts.take(owner, task.id, self.max_per_owner)
        except Exception as exc:  # Redis unreachable: no task starts uncounted
            raise MCPError(INTERNAL_ERROR, f"the running tasks could not be counted ({exc}): no task started") from exc
        if held is not None:
            raise MCPError(
                INVALID_PARAMS,
                f"this caller runs {held} tasks {self.counts.scope}, its limit: wait for one to end, or cancel one",
            )
        self._running[task.id] = task
        if published:
            self.publish(task)
        tg.start_soon(self._run, task, work)
        log.info("task.created", task_id=task.id, tool=tool, owner=owner, published=published)
        return task

    def publish(self, task: Task) -> None:
        self._tasks[task.id] = task

    async def _run(self, task: Task, work: Callable[[], Awaitable[HandlerResult]]) -> None:
        CURRENT_TASK.set(task)
        try:
            with task.scope:
                task.settle("completed", result=_dump(await work()))
        except MCPError as exc:
            task.settle("failed", error=exc.error.model_dump(mode="json", exclude_none=True))
        except Exception as exc:
            log.exception("task.failed", task_id=task.id)
            task.settle("failed", error={"code": INTERNAL_ERROR, "message": f"the tool call failed: {exc}"})
        finally:
            del self._running[task.id]
            task.decided.set()
            with anyio.CancelScope(shield=True):
                await self.counts.release(task.owner, task.id)
            self.on_end()
        log.info("task.ended", task_id=task.id, status=task.status)

    async def decided(self, task: Task, within_s: float = math.inf) -> bool:
        """Whether the task ended (or, a gathering tool's, escalated) within `within_s`. A caller that goes away
        before then never learns its id: the task is cancelled."""
        try:
            with anyio.move_on_after(within_s):
                await task.decided.wait()
        except anyio.get_cancelled_exc_class():
            self._cancel(task, "its caller went away before it became a task")
            raise
        return task.decided.is_set()

    def forget(self, task: Task) -> None:
        """Drop a task its caller was answered without (inline): its id was never told."""
        self._tasks.pop(task.id, None)

    def get(self, task_id: str, owner: str) -> Task:
        """The owner's task of that id; any other id gets the one refusal (`unknown_task`)."""
        task = self._tasks.get(task_id) if task_instance(task_id, owner) == self.instance else None
        if task is None or task.owner != owner or self._expired(task):
            raise _unknown(task_id)
        return task

    def cancel(self, task_id: str, owner: str) -> None:
        self._cancel(self.get(task_id, owner), "cancelled by its caller")

    @staticmethod
    def _cancel(task: Task, why: str, status: str = "cancelled") -> None:
        if task.status not in TERMINAL:
            task.settle(status, error={"code": INTERNAL_ERROR, "message": why})
            task.scope.cancel()
            log.info("task.cancelled", task_id=task.id, why=why, status=status)

    @staticmethod
    def update(task: Task, responses: Mapping[str, Any]) -> None:
        """Answer the task's pending requests named in `responses` (keys it did not ask are ignored); it stays
        `input_required` while any request is left unanswered."""
        if task.status != "input_required":
            raise MCPError(INVALID_PARAMS, f"task {task.id!r} is {task.status}, not input_required: it takes no input")
        for key in responses.keys() & task.asked.keys():
            asked = task.asked.pop(key)
            asked.response = responses[key]
            asked.answered.set()
        task.waits()

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

    async def _renew_forever(self) -> None:
        while True:
            await anyio.sleep(LEASE_S / 3)
            try:
                await self.counts.renew({t.id: t.owner for t in self._running.values()})
            except Exception as exc:  # the next round tries again; a lease lapses only after three misses
                log.warning("tasks.renew_failed", error=str(exc))

    def detailed(self, task: Task) -> dict[str, Any]:
        """`tasks/get`'s answer: the task, with its pending requests (input_required), result (completed) or error
        (failed) inlined."""
        body = self.envelope(task)
        if task.status in ("working", "input_required"):
            body["statusMessage"] = f"running for {time.monotonic() - task.started:.0f} s"
        if task.status == "input_required":
            body["inputRequests"] = {key: asked.request for key, asked in task.asked.items()}
        elif task.status == "completed":
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


def _capabilities(ctx: ServerRequestContext[Any, Any]) -> ClientCapabilities | None:
    return ctx.session.client_capabilities


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = _capabilities(ctx)
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


def _inline_s(ctx: ServerRequestContext[Any, Any]) -> float:
    """How long the client asked a call to be awaited before it becomes a task (`inlineWithinMs`; 0: none)."""
    capabilities = _capabilities(ctx)
    settings = (capabilities.extensions or {}).get(EXTENSION) if capabilities else None
    ms = settings.get("inlineWithinMs") if isinstance(settings, dict) else None
    return min(float(ms), 600_000.0) / 1000 if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0 else 0.0


def _can_answer(ctx: ServerRequestContext[Any, Any]) -> frozenset[str]:
    capabilities = _capabilities(ctx)
    return frozenset(c for c in ASKABLE.values() if capabilities and getattr(capabilities, c, None) is not None)


class Tasks(Extension):
    """The extension: `tasks/get`, `tasks/update`, `tasks/cancel`, and `tools/call` of a long tool as a task."""

    identifier = EXTENSION

    def __init__(
        self,
        store: TaskStore,
        *,
        long: Sequence[str] = (),
        required: Sequence[str] = (),
        gathering: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.long = set(long) | set(required) | set(gathering)
        """Tools that run as a task for a client that declared the extension."""
        self.required = set(required)
        """Tools that run only as a task: a client without the extension is refused (-32021)."""
        self.gathering = set(gathering)
        """Tools whose call becomes a task only once they `escalate` (their input rounds are answered at once)."""

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
        gathers = params.name in self.gathering
        task = await self.store.create(
            _owner(ctx), params.name, lambda: call_next(ctx), published=not gathers, can_answer=_can_answer(ctx)
        )
        if gathers:
            await self.store.decided(task)
            if not task.escalated:  # it answered before it became a task: an input round, or its result
                return _answer(task)
            self.store.publish(task)
        elif (within := _inline_s(ctx)) and await self.store.decided(task, within):
            self.store.forget(task)  # it ended within the client's wait: answered inline, as without the extension
            return _answer(task)
        return self.store.envelope(task) | {"resultType": "task"}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        task = self.store.get(params.task_id, _checked(ctx, params))
        if task.status in TERMINAL:
            task.told.set()
        return self.store.detailed(task)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> dict[str, Any]:
        self.store.update(self.store.get(params.task_id, _checked(ctx, params)), params.input_responses)
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        self.store.cancel(params.task_id, _checked(ctx, params))
        return {"resultType": "complete"}


def _answer(task: Task) -> HandlerResult:
    """What a call that ended before it became a task answers: its result, or its error raised again."""
    if task.error is not None:
        raise MCPError(task.error.get("code", INTERNAL_ERROR), task.error.get("message", ""), task.error.get("data"))
    return task.result
