"""A background response kept in the shared store as it runs, so it outlives its replica: its events (for a
stream that resumes on any replica: appended by its `journal.Journal` before any client has them) and the
state its turn loop goes on from on another replica (`adopt.py`): the request, the Harmony messages up to
the last completed item, the usage, the tool state, and the tool call in flight, if any, with its MCP task
once it became one. Holding and releasing its lease goes through here too."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from orchestrator import harmony as h
from orchestrator.persist import Record, Store
from orchestrator.responses.journal import Journal
from orchestrator.responses.run import Call, Run

log = structlog.get_logger(__name__)


@dataclasses.dataclass
class Where:
    """What a checkpoint writes besides the run: the response's id, input items, owner, where its history
    starts (`n_head`: the system and developer messages, rendered again on adoption), the request as the
    client sent it, and how many times it was adopted so far."""

    rid: str
    items: list[dict[str, Any]]
    owner: str
    n_head: int
    request: dict[str, Any]
    adoptions: int = 0


class Checkpoints:
    """The record of one running background response: saved at each turn boundary (`save`, called by the
    turn loop; its events are in the log, written by `journal`), closed before the final write (`close`) so
    no late save overwrites it, and its hold released after it (`release`)."""

    def __init__(self, store: Store, where: Where, holder: str, journal: Journal) -> None:
        self.store, self.where, self.holder, self.journal = store, where, holder, journal
        self.state: dict[str, Any] | None = None
        self.run: Run | None = None
        # no longer this replica's (another took the hold after a stall, or it is left to one at shutdown):
        # nothing more is written and the hold is not released
        self.lost = False
        self._closed = False
        self._lock = asyncio.Lock()

    def start(self, stop: Callable[[], None]) -> None:
        """Its events stored as they come; `stop` the response once another replica holds it."""

        def fenced() -> None:
            self.lost = True
            stop()

        self.journal.start(fenced)

    async def save(self, r: Run, calling: Call | None = None) -> None:
        """The state another replica goes on from: everything up to the last completed item; `calling`: the
        call now in flight (`adopt.disposition` decides what becomes of it)."""
        self.run = r
        t = r.tools
        self.state = {
            "request": self.where.request,
            "n_head": self.where.n_head,
            "messages": h.dump(r.messages[self.where.n_head :]),
            "calling": h.dump([calling.msg])[0] if calling is not None else None,
            "task": None,
            "usage": dataclasses.asdict(r.usage),
            "tools": {"count": t.count, "calls": t.calls, "pages": t.pages, "results": t.results, "sources": t.sources},
            "required_met": r.turn.required is None,
            "json_retries": r.turn.json_retries,
            "adoptions": self.where.adoptions,
        }
        await self._write()

    async def task_started(self, url: str, task_id: str) -> None:
        """The call in flight became an MCP task at `url`: written before it is first polled, so another
        replica follows that task (`adopt.disposition`) instead of calling again."""
        if self.state is not None:
            self.state["task"] = {"url": url, "id": task_id}
            await self._write()

    async def _write(self) -> None:
        async with self._lock:
            if self._closed or self.lost or self.run is None:
                return
            r, w = self.run, self.where
            record = Record(w.rid, r.conversation, r.builder.snapshot(), w.items, [], [], owner=w.owner)
            record.resume = self.state
            await self.store.put(record)  # its events are in the log

    async def close(self) -> bool:
        """No write after this one returns: the settled record is the last. Whether the log has every event
        (then the record leaves them out); lost to another replica, it is told so too."""
        async with self._lock:
            self._closed = True
        logged = await self.journal.close()
        self.lost = self.lost or self.journal.fenced
        return logged

    async def release(self) -> None:
        """The response is stored finished: its hold is given back (unless another replica has it)."""
        if not self.lost:
            await self.store.release_running(self.where.rid, self.holder)
