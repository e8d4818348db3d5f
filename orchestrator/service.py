"""The Responses service: turns a request into a running response, keeps it live, stores it, releases tools."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import structlog

from orchestrator import compaction, references, truncation
from orchestrator import harmony as h
from orchestrator.addresses import hide, worker_roles
from orchestrator.containers import Containers
from orchestrator.conversations import Bounds, Conversations
from orchestrator.errors import RequestError
from orchestrator.events import new_id
from orchestrator.kinds.compaction import compaction_item
from orchestrator.kinds.mcp import list_tools_item
from orchestrator.limits import KeyLimits
from orchestrator.live import Live, LiveResponses
from orchestrator.mcp_policy import McpPolicy
from orchestrator.persist import Record, Stores
from orchestrator.prepare import Preparer, scoped
from orchestrator.run import Run
from orchestrator.schema import ResponsesRequest
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Endpoints, cleanup_sessions
from orchestrator.turns import HARMONY, run
from orchestrator.worker.client import Chat, CountChat, Generate, WorkerError, WorkerUnavailable
from toolkit.tracing import annotate, span
from toolkit.wire import fleet_secret

log = structlog.get_logger(__name__)

Settled = Callable[[str, dict[str, Any] | None, list[tuple[str, str]]], None]
"""(status, usage, [(namespace, outcome)]) -> None: told of each response that ends (the metrics)."""


class ResponsesService(LiveResponses):
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
        self.conversations = Conversations(stores.conversations, bounds)
        fleet_secret()  # the owner header's key: read (or made) now, not on the event loop by a response
        self.worker_roles = worker_roles(settings.worker_urls)
        self.live: dict[str, Live] = {}
        self.limits = KeyLimits.from_settings(settings)
        self.closing = False
        """Set at shutdown: responses cancelled then fail (the caller did not cancel them)."""
        self.on_settled = on_settled  # the metrics
        self.preparer = Preparer(
            settings,
            generate=generate,
            store=self.store,
            conversations=self.conversations,
            endpoints=endpoints,
            policy=policy or McpPolicy.from_settings(settings),
            live=self.live,
            containers=containers,  # code_interpreter's and shell's containers
            chat=chat,
            count_chat=count_chat,
            api_for=api_for,
        )

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
            builder, rid = p.run.builder, p.run.builder.id
            live = Live(builder, req, owner, conversation=p.conversation, lease=lease, kept=kept, slot=slot)
            builder.start(queued=req.background)
            if req.background:  # other replicas sharing the store can see it running (and ask to cancel it)
                snapshot, events = builder.snapshot(), list(builder.events)
                await self.store.hold_running([rid], self.settings.background_hold_s)  # before anyone can read it
                await self.store.put(Record(rid, p.run.conversation, snapshot, p.items, [], events, owner=owner))
        except BaseException:
            slot.release()
            if lease is not None:  # refused before it ran: the conversation is free again at once
                await lease.release()
            raise
        self.live[rid] = live
        live.task = asyncio.create_task(self._traced(live, p.run, p.listings, p.n_head, p.items))
        return live

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

    async def _traced(self, live: Live, r: Run, listings: dict[str, Any], n_head: int, items: list[dict]) -> None:
        """`_execute` under one span per response (a child of the request's), its ids on every log line."""
        ids = {"response_id": live.builder.id, "conversation_id": r.conversation}
        with span("response", **ids) as current, structlog.contextvars.bound_contextvars(**ids):
            try:
                await self._execute(live, r, listings, n_head, items)
            finally:
                status = live.builder.body.get("status")
                annotate(current, outcome="ok" if status == "completed" else str(status))

    def worker_failure(self, exc: WorkerUnavailable | WorkerError) -> str:
        """A worker failure as the client reads it: the worker named by its role; its address to the log."""
        log.warning("worker.failed", error=str(exc))
        return hide(str(exc), self.worker_roles)

    # --- running ----------------------------------------------------------------------------------

    async def _execute(self, live: Live, r: Run, listings: dict[str, Any], n_head: int, items: list[dict]) -> None:
        b = live.builder
        try:
            b.in_progress()
            for label, tools in listings.items():
                list_tools_item(b, label, tools)
            await run(r)
        except asyncio.CancelledError:
            if not b.finished and self.closing:  # nobody asked: the replica stops (SIGTERM)
                error = {"code": "server_error", "message": "the orchestrator replica running it shut down"}
                b.finish("failed", usage=r.usage.as_dict(), error=error)
            elif not b.finished:
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
                await r.sessions.aclose()
            finally:  # a cancel that lands while the sessions close must not skip storing the response
                with anyio.CancelScope(shield=True):
                    await self._settle(live, r, n_head, items)

    async def _settle(self, live: Live, r: Run, n_head: int, items: list[dict]) -> None:
        b, req = live.builder, live.request
        status = b.body["status"]
        if self.on_settled is not None:
            self.on_settled(status, b.body.get("usage"), r.tools.log)
        saving: str | None = None  # what the caller was promised and is being written, while it is
        try:
            state = {"calls": r.tools.calls, "pending": r.tools.pending, "pages": r.tools.pages}
            if live.conversation is not None and status in ("completed", "incomplete"):
                saving = f"added to conversation {live.conversation.id}"
                await self.conversations.append(live.conversation, items + b.body["output"], state)
            live.record = Record(
                b.id, r.conversation, b.body, items, h.dump(r.messages[n_head:]), b.events, state, live.owner
            )
            if req.store:
                saving = "stored"
                await self.store.put(live.record)
            saving = None
            if req.store:
                await references.index(self.store, live.record)
            lives_on = req.store or live.conversation is not None or live.kept is not None
            if r.tools.results and lives_on:  # for client-kept history
                await self.store.put_results({scoped(live.owner, k): v for k, v in r.tools.results.items()})
            if r.sessions.used and lives_on:  # its tool sessions stay until idle (the reaper frees them)
                await self.store.touch_conversation(r.conversation, r.sessions.used)
            elif r.sessions.used:
                await cleanup_sessions(r.conversation, r.sessions.used)
        except Exception as exc:
            log.exception("response.settle_failed", response_id=b.id)
            if saving is not None:  # the caller must not take it for kept: it cannot be retrieved or continued
                live.unsaved = (
                    f"response {b.id} finished {status} but could not be {saving}: {str(exc) or type(exc).__name__}"
                )
        finally:
            log.info("response.done", response_id=b.id, status=status, output_items=len(b.output))
            self.live.pop(b.id, None)
            if live.slot is not None:
                live.slot.release()
            await self._release(live)
            live.done.set()

    async def _release(self, live: Live) -> None:
        """The conversation is free for the next response once this one's items are there (or it failed)."""
        if live.lease is None:
            return
        try:
            await live.lease.release()
        except Exception:
            log.exception("conversation.release_failed", conversation_id=live.lease.conv_id)  # it lapses by itself

    async def reap_idle(self) -> None:
        for conversation, urls in await self.store.idle_conversations(self.settings.session_idle_s):
            await cleanup_sessions(conversation, urls)
            await self.store.forget_conversation(conversation)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The service's background loops (idle conversations, cancels asked on other replicas) while it
        serves; on exit, the responses still running are cancelled."""
        loops = [
            asyncio.create_task(every(self.settings.reap_interval_s, self.reap_idle, "reaper")),
            asyncio.create_task(every(self.settings.cancel_poll_s, self.watch_cancels, "cancel_watch")),
            asyncio.create_task(every(self.settings.background_hold_s / 3, self.hold_background, "background_hold")),
        ]
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()
            await self.aclose()

    async def hold_background(self) -> None:
        """Renew the holds of the background responses this replica runs (see `LiveResponses.find`)."""
        if ids := [rid for rid, lv in self.live.items() if lv.request.background]:
            await self.store.hold_running(ids, self.settings.background_hold_s)

    async def aclose(self) -> None:
        self.closing = True
        tasks = [lv.task for lv in self.live.values() if lv.task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


async def every(interval_s: float, job: Callable[[], Awaitable[None]], name: str) -> None:
    """Run `job` every `interval_s` until cancelled; a failed round is logged and the next one runs."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await job()
        except Exception:
            log.exception(f"{name}.failed")
