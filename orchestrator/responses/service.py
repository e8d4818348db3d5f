"""The Responses service: the coordinator that starts a response (prepared by `prepare`), runs its turn loop under
one span, maps how it ended to its status, and hands it to `settle`; `upkeep`'s loops run beside it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import structlog

from orchestrator.callfeed import CallFeed
from orchestrator.containers import Containers
from orchestrator.conversations import Bounds, Conversations
from orchestrator.errors import RequestError
from orchestrator.guard.addresses import hide, worker_roles
from orchestrator.guard.limits import KeyLimits
from orchestrator.guard.mcp_policy import McpPolicy
from orchestrator.kinds.compaction import compaction_item
from orchestrator.kinds.mcp import list_tools_item
from orchestrator.persist import Record, Stores
from orchestrator.request import attachments
from orchestrator.request.schema import ResponsesRequest
from orchestrator.responses import compaction, truncation
from orchestrator.responses.adopt import Adopter
from orchestrator.responses.checkpoint import Checkpoints, Where
from orchestrator.responses.events import new_id
from orchestrator.responses.journal import Journal
from orchestrator.responses.live import Live, LiveResponses
from orchestrator.responses.prepare import Prepared, Preparer
from orchestrator.responses.roster import ForegroundRoster
from orchestrator.responses.run import Run
from orchestrator.responses.settle import Settled, Settler
from orchestrator.responses.turns import HARMONY, run
from orchestrator.responses.upkeep import Upkeep
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Endpoints
from orchestrator.worker.client import Chat, CountChat, Generate, WorkerError, WorkerUnavailable
from toolkit.tracing import annotate, span
from toolkit.wire import fleet_secret

log = structlog.get_logger(__name__)


class ResponsesService:
    """One replica's responses: built once by the app with every part it needs, sharing one `live` map with
    the parts that prepare (`Preparer`), follow (`LiveResponses`), settle (`Settler`) and upkeep (`Upkeep`)."""

    def __init__(
        self,
        settings: OrchestratorSettings,
        *,
        generate: Generate,
        stores: Stores,
        endpoints: Endpoints,
        policy: McpPolicy | None = None,
        containers: Containers | None = None,
        chat: Chat | None = None,
        api_for: Any = None,
        count_chat: CountChat | None = None,
        on_settled: Settled | None = None,
    ) -> None:
        self.settings = settings
        self.store = stores.responses
        bounds = Bounds(settings.max_conversation_items, settings.max_conversation_bytes)
        limits = attachments.Limits(settings.max_input_file_chars, settings.max_body_bytes)
        files = containers.files if containers is not None else None
        self.conversations = Conversations(stores.conversations, bounds, files, limits)
        fleet_secret()  # the owner header's key: read (or made) now, not on the event loop by a response
        self.worker_roles = worker_roles(settings.worker_urls)
        self.live: dict[str, Live] = {}
        self.limits = KeyLimits.from_settings(settings)
        self.closing = False
        """Set at shutdown: responses cancelled then fail (the caller did not cancel them)."""
        self.preparer = Preparer(
            settings,
            generate=generate,
            store=self.store,
            conversations=self.conversations,
            endpoints=endpoints,
            policy=policy or McpPolicy.from_settings(settings),
            live=self.live,
            objects=stores.objects,
            containers=containers,  # code_interpreter's and shell's containers
            chat=chat,
            count_chat=count_chat,
            api_for=api_for,
        )
        self.holder = new_id("replica")  # this replica's name on the background responses it holds
        self.calls = CallFeed(self.holder)
        self.adopter = Adopter(
            settings, self.store, self.conversations, self.preparer, self.limits, self.live, self.holder, self._launch
        )
        self.responses = LiveResponses(self.live, self.store, self.adopter.adopt)
        self.settler = Settler(self.store, self.conversations, self.live, on_settled)
        self.roster = ForegroundRoster(stores.roster, self.holder, self.live)  # the foreground ones, fleet-wide
        self.upkeep = Upkeep(settings, self.store, self.live, self.adopter, self.roster)

    # --- creating ---------------------------------------------------------------------------------

    async def create(
        self,
        req: ResponsesRequest,
        owner: str,
        *,
        kept: dict[str, Record] | None = None,
        warm_only: bool = False,
        base_url: str = "",
    ) -> Live:
        """Start a response owned by `owner` (the caller's key id); `kept`: a WebSocket connection's responses
        that `previous_response_id` may name without a store read; `warm_only`: prefill the worker, no output;
        `base_url`: the orchestrator as the caller reached it (links to container files, unless configured)."""
        if req.background and not req.store:
            raise RequestError("background responses need store=true", "background")
        slot = self.limits.running.take(owner)  # before the first await, so a burst cannot all pass the check
        lease = None
        try:
            if req.store:  # refused now rather than after it ran, when the fleet-wide store is full
                await self.store.room(owner)
            conv = await self.preparer.conversation(req, owner)
            lease = await self.conversations.hold(conv) if conv else None  # before its items are read
            p = await self.preparer.prepare(req, owner, kept)
            if p.conversation is not None:  # its input is added to the conversation: within the bounds
                await self.conversations.room(p.stored, p.items, "input")
            await self.preparer.attach_workspaces(p.run, owner, self.settings.public_url or base_url)
            p.run.warm_only = warm_only
            builder = p.run.builder
            live = Live(builder, req, owner, conversation=p.conversation, lease=lease, kept=kept, slot=slot)
            builder.start(queued=req.background)
            if req.background:  # other replicas sharing the store can see it running, cancel or adopt it
                await self._hold(live, p)
        except BaseException:
            slot.release()
            if lease is not None:  # refused before it ran: the conversation is free again at once
                await lease.release()
            raise
        self._launch(live, p)
        return live

    async def _hold(self, live: Live, p: Prepared) -> None:
        """A background response held by this replica, then stored with a checkpoint that starts it over, and
        its first events in its log (`journal.py`: readers have them once stored)."""
        b, req, s = live.builder, live.request, self.settings
        await self.store.hold_running([b.id], s.background_hold_s, self.holder)  # before it is read
        request = req.model_dump(mode="json", exclude_unset=True)
        where = Where(b.id, p.items, live.owner, p.n_head, request)
        journal = Journal(self.store, b, self.holder, s.background_hold_s, s.event_flush_s)
        p.run.checkpoint = live.checkpoint = Checkpoints(self.store, where, self.holder, journal)
        p.run.sessions.on_task = live.checkpoint.task_started
        start = {"request": request, "n_head": p.n_head, "messages": None, "adoptions": 0}  # not begun
        await self.store.put(Record(b.id, p.run.conversation, b.snapshot(), p.items, [], [], {}, live.owner, start))
        await journal.flush()

    def _launch(self, live: Live, p: Prepared, resume: Callable[[], Awaitable[None]] | None = None) -> None:
        """Run `live` on this replica: from the start, or (`resume`) as an adopted response goes on."""
        self.live[live.builder.id] = live
        p.run.feed = self.calls
        begin = resume or functools.partial(self._start, live, p.run, p.listings)
        live.task = task = asyncio.create_task(self._traced(live, p.run, p.n_head, p.items, begin))
        if live.checkpoint is not None:
            live.checkpoint.start(task.cancel)

    async def count_input_tokens(self, req: ResponsesRequest, owner: str) -> int:
        """The first turn's prompt in tokens, rendered exactly as `create` would render it (nothing runs)."""
        r = (await self.preparer.prepare(req, owner)).run
        r.messages.extend(r.new_input)
        model = r.model or HARMONY
        if r.context_tokens is not None:
            await truncation.fit(r, model, r.context_tokens)
        return await model.count(r)

    async def compact(self, req: ResponsesRequest, owner: str) -> dict[str, Any]:
        """OpenAI's compacted window: the user's messages, then one compaction item the model wrote. Its model
        turn counts against the key's running limit, as a response's does."""
        with self.limits.running.take(owner):  # before the first await
            p = await self.preparer.prepare(req, owner)
            r = p.run
            messages = r.messages + r.new_input
            summary = await compaction.summarise(r, r.model or HARMONY, messages)
        output = [compaction.user_item(m) for m in compaction.kept(messages[p.n_head :])]
        return {
            "id": new_id("cmp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*output, compaction_item(summary)],
            "usage": r.usage.as_dict(),
        }

    async def _traced(
        self, live: Live, r: Run, n_head: int, items: list[dict], begin: Callable[[], Awaitable[None]]
    ) -> None:
        """`_execute` under one span per response (a child of the request's), its ids on every log line."""
        ids = {"response_id": live.builder.id, "conversation_id": r.conversation}
        with span("response", **ids) as current, structlog.contextvars.bound_contextvars(**ids):
            try:
                await self._execute(live, r, n_head, items, begin)
            finally:
                status = live.builder.body.get("status")
                annotate(current, outcome="ok" if status == "completed" else str(status))

    def worker_failure(self, exc: WorkerUnavailable | WorkerError) -> str:
        """A worker failure as the client reads it: the worker named by its role; its address to the log."""
        log.warning("worker.failed", error=str(exc))
        return hide(str(exc), self.worker_roles)

    # --- running ----------------------------------------------------------------------------------

    async def _start(self, live: Live, r: Run, listings: dict[str, Any]) -> None:
        """A response from its start: in progress, the MCP listings, then the turn loop."""
        b = live.builder
        if all(e["type"] != "response.in_progress" for e in b.events):  # an adopted one may have begun
            b.in_progress()
        for label, tools in listings.items():
            list_tools_item(b, label, tools)
        await run(r)

    async def _execute(
        self, live: Live, r: Run, n_head: int, items: list[dict], begin: Callable[[], Awaitable[None]]
    ) -> None:
        b = live.builder
        try:
            await begin()
        except asyncio.CancelledError:
            held = live.checkpoint
            if not b.finished and held is not None and (self.closing or held.lost):  # another replica goes on
                held.lost = True  # nothing more written, its tool sessions left to it: adopted once its hold lapses
            elif not b.finished and self.closing:  # nobody asked: the replica stops (SIGTERM)
                error = {"code": "server_error", "message": "the orchestrator replica running it shut down"}
                b.finish("failed", usage=r.usage.as_dict(), error=error)
            elif not b.finished:
                live.cut_call = b.open_call()  # its tool's work is ended too (`Settler`)
                b.finish("cancelled", usage=r.usage.as_dict())
        except WorkerUnavailable as exc:
            live.http_status, live.error_code = 503, "worker_unavailable"
            error = {"code": "server_error", "message": self.worker_failure(exc)}
            b.finish("failed", usage=r.usage.as_dict(), error=error)
        except WorkerError as exc:
            live.http_status, live.error_code = 502, "worker_error"
            error = {"code": "server_error", "message": self.worker_failure(exc)}
            b.finish("failed", usage=r.usage.as_dict(), error=error)
        except Exception as exc:
            log.exception("response.crashed", response_id=b.id)
            live.http_status = 500
            if not b.finished:
                b.finish("failed", error={"code": "server_error", "message": f"internal error: {type(exc).__name__}"})
        finally:
            try:
                if live.cut_call:  # cancelled in flight: the call's MCP task is cancelled too
                    await r.sessions.cancel_tasks()
                await r.sessions.aclose()
            finally:  # a cancel that lands while the sessions close must not skip storing the response
                with anyio.CancelScope(shield=True):
                    await self.settler.settle(live, r, n_head, items)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The background loops (`Upkeep`) while the service serves; on exit, the responses still running are
        cancelled."""
        try:
            async with self.upkeep.running():
                yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        self.closing = True
        tasks = [lv.task for lv in self.live.values() if lv.task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
