"""Adoption: a background response whose replica stopped (its hold lapsed) is taken over by another replica,
which takes the hold atomically, rebuilds the run from the last checkpoint (`checkpoint.py`) and goes on with
its turn loop from the last completed item. A turn cut off mid-generation is generated again: its items keep
exactly the stored events (the only ones a client can have had: `journal.py`) and are closed cut short after
them; a tool call cut off in flight is followed by its MCP task when it had become one, else (or when the task
is lost) runs again only when its kind declares it safe (`disposition`), otherwise the model is told it was
interrupted. A response that cannot go on, or was adopted too often
(one that keeps killing its replicas), is stored `failed` with the reason."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import structlog

from orchestrator import harmony as h
from orchestrator.conversations import Conversations, Lease
from orchestrator.errors import RequestError
from orchestrator.guard.limits import KeyLimits, LimitExceeded
from orchestrator.kinds import classify
from orchestrator.kinds.base import Kind, answer
from orchestrator.persist import Record, Store
from orchestrator.request.schema import ResponsesRequest
from orchestrator.responses import toolcalls
from orchestrator.responses.checkpoint import Checkpoints, Where
from orchestrator.responses.events import ResponseBuilder
from orchestrator.responses.journal import Journal
from orchestrator.responses.live import RUNNING, Live
from orchestrator.responses.prepare import Prepared, Preparer
from orchestrator.responses.run import Call, Run, Usage
from orchestrator.responses.turns import run
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Resume, ToolSessions, interrupted

log = structlog.get_logger(__name__)

MAX_ADOPTIONS = 3  # a response whose replicas stopped this many more times is failed, not adopted again
INTERRUPTED = interrupted("it is not safe to run it again unasked")

Launch = Callable[[Live, Prepared, Callable[[], Awaitable[None]] | None], None]
"""(live, prepared, how it goes on: None for from the start) -> None: the service runs it on this replica."""


class CannotGoOn(Exception):
    """The response cannot be continued here: it is failed with this reason."""


class Later(Exception):
    """Not now (the key's running limit is full here, its conversation still locked by the stopped holder):
    the hold is left to lapse, and a replica tries again."""


def disposition(kind: Kind | None, fn: str, task: bool = False) -> Literal["resume", "rerun", "interrupt"]:
    """What becomes of a tool call in flight when its replica stopped: followed by its MCP task id when it
    became a task (`task`), run again when its kind declares the function safe to repeat (`Kind.rerun_safe`),
    else the model is told it was interrupted."""
    if task and kind is not None:
        return "resume"
    return "rerun" if kind is not None and fn in kind.rerun_safe else "interrupt"


async def go_on(r: Run, calling: dict[str, Any] | None, task: dict[str, str] | None = None) -> None:
    """An adopted run: the call that was in flight settled (`disposition`), then the turn loop. A resumed
    call whose task is lost falls back to the rule without a task (`ToolSessions._resumed`)."""
    if calling is not None:
        msg = h.load([calling])[0]
        kind, ns, fn = classify(r.toolset, msg.recipient or "")
        becomes = disposition(kind, fn, task is not None)
        if becomes == "resume" and task is not None:
            log.info("response.call_resumed", recipient=msg.recipient, task_id=task["id"])
            r.sessions.resuming = Resume(task["url"], task["id"], rerun=disposition(kind, fn) == "rerun")
            await toolcalls.call(r, Call(msg, None, True, kind, ns, fn))
        elif becomes == "rerun":
            log.info("response.call_rerun", recipient=msg.recipient)
            await toolcalls.call(r, Call(msg, None, True, kind, ns, fn))
        else:
            log.info("response.call_interrupted", recipient=msg.recipient)
            r.tools.log.append((ns, "interrupted"))
            answer(r, msg.recipient or "", INTERRUPTED, msg.channel)
    await run(r, resumed=True)


def restore(r: Run, state: dict[str, Any]) -> None:
    """The run as its last checkpoint left it: the head rendered here again, then the messages so far."""
    r.messages = r.messages[: state["n_head"]] + h.load(state["messages"])
    r.new_input = []
    r.usage = Usage(**state["usage"])
    tools = state["tools"]
    r.tools.count, r.tools.calls, r.tools.results = tools["count"], tools["calls"], tools["results"]
    r.tools.pages = {int(k): v for k, v in tools["pages"].items()}
    r.tools.sources = tools["sources"]
    if state["required_met"]:
        r.turn.required = None
    r.turn.json_retries = state["json_retries"]


@dataclasses.dataclass
class Adopter:
    """Takes over the orphaned background responses this replica finds (its upkeep loop, or a reader)."""

    settings: OrchestratorSettings
    store: Store
    conversations: Conversations
    preparer: Preparer
    limits: KeyLimits
    live: dict[str, Live]
    holder: str  # this replica's name on the holds it takes
    launch: Launch
    # being adopted here now: the upkeep loop and a reader may race for one, and the hold is this replica's
    # name, which both would take
    adopting: set[str] = dataclasses.field(default_factory=set)

    async def adopt(self, rid: str) -> None:
        """Take `rid` if its hold lapsed and no other replica took it first; go on with it here, or store it
        ended with the reason it cannot go on."""
        if rid in self.live or rid in self.adopting:
            return
        self.adopting.add(rid)
        try:
            if rid in await self.store.hold_running([rid], self.ttl_s, self.holder):
                await self._take(rid)
        finally:
            self.adopting.discard(rid)

    async def _take(self, rid: str) -> None:
        record = await self.store.get(rid)
        if record is None or record.body.get("status") not in RUNNING:
            return await self.store.release_running(rid, self.holder)  # finished (or deleted) meanwhile
        try:
            await self._go_on(record)
        except Later as exc:
            log.info("response.adoption_later", response_id=rid, reason=str(exc))
        except CannotGoOn as exc:
            await self.end(record, "failed", str(exc))
        except RequestError as exc:  # what the request names is gone or refused now (a server, a store)
            await self.end(record, "failed", f"it cannot be continued here: {exc}")
        except Exception as exc:  # a checkpoint this replica cannot read: failed once, not retried every round
            log.exception("response.adoption_crashed", response_id=rid)
            await self.end(record, "failed", f"internal error while adopting it: {type(exc).__name__}")

    @property
    def ttl_s(self) -> float:
        return self.settings.background_hold_s

    async def _go_on(self, record: Record) -> None:
        state = record.resume
        if state is None:
            raise CannotGoOn("it has no checkpoint to go on from")
        if await self.store.cancel_requested([record.id]):
            await self._cancel_task(record, state.get("task"))
            return await self.end(record, "cancelled", None)
        adoptions = state["adoptions"] + 1
        if adoptions > MAX_ADOPTIONS:
            raise CannotGoOn(f"the replica running it stopped {adoptions} times; it is not adopted again")
        req = ResponsesRequest.model_validate(state["request"])
        try:
            slot = self.limits.running.take(record.owner)
        except LimitExceeded as exc:
            raise Later("this replica runs the key's limit of responses") from exc
        try:
            live, p = await self._rebuild(record, req, state, adoptions)
        except BaseException:
            slot.release()
            raise
        live.slot = slot
        begun = state["messages"] is not None
        log.warning("response.adopted", response_id=record.id, adoptions=adoptions, begun=begun)
        resume = (lambda: go_on(p.run, state["calling"], state.get("task"))) if begun else None
        self.launch(live, p, resume)

    async def _rebuild(
        self, record: Record, req: ResponsesRequest, state: dict[str, Any], adoptions: int
    ) -> tuple[Live, Prepared]:
        """The response prepared again from its request, then brought to where its checkpoint left it."""
        lease = await self._lease(req, record.owner)
        try:
            p = await self.preparer.prepare(req, record.owner)
            await self.preparer.attach_workspaces(p.run, record.owner, self.settings.public_url or "")
        except BaseException:
            if lease is not None:
                await lease.release()
            raise
        r = p.run
        r.builder = ResponseBuilder.restore(record.body, record.events)  # from the log: what clients may have
        s = self.settings
        journal = Journal(self.store, r.builder, self.holder, s.background_hold_s, s.event_flush_s, len(record.events))
        r.builder.close_open()  # the turn cut off: its items end after the stored events, and it is generated again
        r.conversation = r.sessions.session_id = record.conversation  # the same tool sessions
        if state["messages"] is not None:
            restore(r, state)
        where = Where(record.id, p.items, record.owner, p.n_head, state["request"], adoptions)
        r.checkpoint = checkpoint = Checkpoints(self.store, where, self.holder, journal)
        r.sessions.on_task = checkpoint.task_started
        live = Live(r.builder, req, record.owner, conversation=p.conversation, lease=lease, checkpoint=checkpoint)
        return live, p

    async def _cancel_task(self, record: Record, task: dict[str, str] | None) -> None:
        """A response cancelled while no replica ran it: the MCP task its stopped replica left is cancelled."""
        if task is None:
            return
        sessions = ToolSessions(session_id=record.conversation, owner=record.owner)
        try:
            await sessions.cancel_task(task["url"], task["id"])
        except Exception as exc:  # the server is gone: its task is gone with it
            log.warning("response.task_cancel_failed", response_id=record.id, error=str(exc))
        finally:
            await sessions.aclose()

    async def _lease(self, req: ResponsesRequest, owner: str) -> Lease | None:
        conv = await self.preparer.conversation(req, owner)
        if conv is None:
            return None
        try:
            return await self.conversations.hold(conv)
        except RequestError as exc:
            raise Later("its conversation is still held by the replica that stopped") from exc

    async def end(self, record: Record, status: str, reason: str | None) -> None:
        """Store the response ended (`failed` with why it cannot go on, or `cancelled`) and release it."""
        builder = ResponseBuilder.restore(record.body, record.events)
        error = {"code": "server_error", "message": f"the background response cannot go on: {reason}"}
        builder.finish(status, error=error if reason else None)
        log.warning("response.not_adopted", response_id=record.id, status=status, reason=reason)
        ended = builder.events[len(record.events) :]
        if await self.store.append_events(record.id, len(record.events), ended, self.holder, self.ttl_s):
            await self.store.put(dataclasses.replace(record, body=builder.body, events=[], resume=None))
            await self.store.release_running(record.id, self.holder)
