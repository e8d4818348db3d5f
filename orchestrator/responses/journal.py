"""A background response's events, stored before any client is sent them (write-ahead).

Another replica that adopts the response numbers its next events after the stored ones. A client must
therefore never hold an event the store lacks: that event's number would later carry other text. So the
builder of a background response lets its readers have only what its journal stored (`ResponseBuilder.publish`).
The journal appends in batches, one per flush window (`--event-flush-s`), to the store's append-only log;
that costs the new events alone, where rewriting the record cost the whole log. Each append is fenced by the
response's hold. Once another replica holds it, the append is refused, and this replica stops the response.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from orchestrator.persist import Store
from orchestrator.responses.events import ResponseBuilder

log = structlog.get_logger(__name__)

RETRY_S = 1.0  # after a failed append: the store is down, and the next try waits this long


class Journal:
    """The stored prefix of one builder's events: `stored` of them are in the log, and readers have those."""

    def __init__(
        self, store: Store, builder: ResponseBuilder, holder: str, hold_s: float, window_s: float, stored: int = 0
    ) -> None:
        self.store, self.builder, self.holder = store, builder, holder
        self.hold_s, self.window_s, self.stored = hold_s, window_s, stored
        self.fenced = False  # an append was refused: another replica holds the response now
        builder.write_ahead = True
        builder.publish(stored)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self, fenced: Callable[[], None]) -> None:
        """Store new events as they come, until closed; `fenced` is called once an append is refused."""
        self._task = asyncio.create_task(self._follow(fenced))

    async def _follow(self, fenced: Callable[[], None]) -> None:
        while not self.fenced:
            await self.builder.unstored(self.stored)
            await asyncio.sleep(self.window_s)  # the batch: what else comes within the window
            try:
                await asyncio.shield(self.flush())  # a close waits for an append under way, never cuts it
            except Exception:  # the store failing: readers wait, and a later batch tries again
                log.warning("response.events_unstored", response_id=self.builder.id, exc_info=True)
                await asyncio.sleep(RETRY_S)
        fenced()

    async def flush(self) -> None:
        """Append the events not stored yet, then let readers have them (nothing once fenced)."""
        async with self._lock:
            batch = self.builder.events[self.stored :]
            if self.fenced or not batch:
                return
            if not await self.store.append_events(self.builder.id, self.stored, batch, self.holder, self.hold_s):
                log.warning("response.events_fenced", response_id=self.builder.id, stored=self.stored)
                self.fenced = True
                return
            self.stored += len(batch)
            self.builder.publish(self.stored)

    async def close(self) -> bool:
        """The last batch stored (with the terminal event) and the flusher stopped; whether the log has
        every event. When the store fails here, the readers are let have the rest anyway: the response has
        ended, and the settled record carries the events itself."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self.flush()
        except Exception:
            log.exception("response.events_unstored", response_id=self.builder.id)
        logged = self.stored == len(self.builder.events)
        if not logged and not self.fenced:
            self.builder.publish(len(self.builder.events))
        return logged
