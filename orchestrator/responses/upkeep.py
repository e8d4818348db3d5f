"""The loops a replica runs beside its responses: the tool sessions of idle conversations cleaned up, the
cancels asked on other replicas applied to the background responses it runs, and their holds renewed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog

from orchestrator.persist import Store
from orchestrator.responses.live import Live
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import cleanup_sessions

log = structlog.get_logger(__name__)


class Upkeep:
    """The background loops over the shared store and this replica's `live` responses."""

    def __init__(self, settings: OrchestratorSettings, store: Store, live: dict[str, Live]) -> None:
        self.settings, self.store, self.live = settings, store, live

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The loops while the service serves; cancelled on exit."""
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

    async def reap_idle(self) -> None:
        """Clean up the tool sessions of the conversations idle for `--session-idle-s` (claimed one replica each)."""
        for conversation, urls in await self.store.idle_conversations(self.settings.session_idle_s):
            await cleanup_sessions(conversation, urls)
            await self.store.forget_conversation(conversation)

    async def hold_background(self) -> None:
        """Renew the holds of the background responses this replica runs (see `LiveResponses.find`)."""
        if ids := [rid for rid, lv in self.live.items() if lv.request.background]:
            await self.store.hold_running(ids, self.settings.background_hold_s)

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
