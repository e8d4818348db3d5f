"""The loops a replica runs beside its responses: the tool sessions of idle conversations cleaned up, the
cancels asked on other replicas applied to the background responses it runs, their holds renewed, the
background responses whose replica stopped adopted, and its foreground ones renewed in the fleet's roster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog

from orchestrator.persist import Store
from orchestrator.responses.adopt import Adopter
from orchestrator.responses.live import Live
from orchestrator.responses.roster import RENEW_S, ForegroundRoster
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import cleanup_sessions

log = structlog.get_logger(__name__)


class Upkeep:
    """The background loops over the shared store and this replica's `live` responses."""

    def __init__(
        self,
        settings: OrchestratorSettings,
        store: Store,
        live: dict[str, Live],
        adopter: Adopter,
        roster: ForegroundRoster,
    ) -> None:
        self.settings, self.store, self.live, self.adopter, self.roster = settings, store, live, adopter, roster

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The loops while the service serves; cancelled on exit."""
        loops = [
            asyncio.create_task(every(self.settings.reap_interval_s, self.reap_idle, "reaper")),
            asyncio.create_task(every(self.settings.cancel_poll_s, self.watch_cancels, "cancel_watch")),
            asyncio.create_task(every(self.settings.background_hold_s / 3, self.hold_background, "background_hold")),
            asyncio.create_task(every(self.settings.background_hold_s / 3, self.adopt_orphans, "adoption")),
            asyncio.create_task(every(RENEW_S, self.roster.renew, "foreground_roster")),
        ]
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()

    async def reap_idle(self) -> None:
        """Clean up the tool sessions of the conversations idle for `--session-idle-s` (claimed one replica each)."""
        for conversation, urls in await self.store.idle_conversations(self.settings.session_idle_s):
            await cleanup_sessions(conversation, urls)
            await self.store.forget_conversation(conversation)

    async def hold_background(self) -> None:
        """Renew the holds of the background responses this replica runs (their events are stored as they
        come, `journal.py`: the heartbeat writes nothing else); one another replica took meanwhile (this one
        stalled past its hold) is stopped here without a word more to the store."""
        running = {rid: lv.checkpoint for rid, lv in self.live.items() if lv.checkpoint is not None}
        if not running:
            return
        held = await self.store.hold_running(list(running), self.settings.background_hold_s, self.adopter.holder)
        for rid, checkpoint in running.items():
            if rid not in held and (live := self.live.get(rid)) is not None and live.task is not None:
                log.warning("response.hold_lost", response_id=rid)
                checkpoint.lost = True
                live.task.cancel()

    async def adopt_orphans(self) -> None:
        """Adopt the background responses whose hold lapsed (their replica stopped), racing the others."""
        for rid in await self.store.orphaned():
            await self.adopter.adopt(rid)

    async def watch_cancels(self) -> None:
        """Cancel the background responses this replica runs that another replica was asked to cancel."""
        ids = [rid for rid, lv in self.live.items() if lv.request.background]
        for rid in await self.store.cancel_requested(ids) if ids else ():
            live = self.live.get(rid)
            if live is not None and live.task:
                log.info("response.cancelled_elsewhere", response_id=rid)
                live.task.cancel()


async def every(interval_s: float, job: Callable[[], Awaitable[None]], name: str) -> None:
    """Run `job` every `interval_s` until cancelled; a failed round is logged and the next one runs."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await job()
        except Exception:
            log.exception(f"{name}.failed")
