"""This replica's foreground responses entered in the fleet's roster (`persist.roster`), so every replica's
console lists them beside the background ones, which are in the shared store already.

Kept off the response's hot path: one write as a response starts (sent beside its first turn, not before it), one
as it ends (after its caller has its answer), and one renewal of the replica's whole list every `RENEW_S`,
which also carries each response's tool-call count as of then (read off its output at that moment, so a turn
writes nothing). A store that fails is logged once per outage and never fails a response: its entries come
back with the first renewal that gets through, and lapse after `TTL_S` when the replica stops renewing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import anyio
import structlog

from orchestrator.persist.roster import Roster, Running
from orchestrator.responses.live import Live

log = structlog.get_logger(__name__)
RENEW_S = 2.0
TTL_S = 3 * RENEW_S  # two renewals may fail before another replica's console stops listing them


def tool_calls(body: dict[str, Any]) -> int:
    """The tool calls in a response's output so far, of every kind (the items typed `..._call`)."""
    output = body.get("output") or []
    return sum(1 for i in output if isinstance(i, dict) and str(i.get("type", "")).endswith("_call"))


def entry(live: Live, replica: str) -> Running:
    body = live.builder.body
    created = float(body.get("created_at") or time.time())
    return Running(live.builder.id, live.owner, body.get("model") or "", created, replica, tool_calls(body))


class ForegroundRoster:
    """The roster seen from one replica (`replica`, its name on every entry) over its `live` responses."""

    def __init__(self, store: Roster, replica: str, live: dict[str, Live]) -> None:
        self.store, self.replica, self.live = store, replica, live
        self._listed = False  # whether the last renewal left entries (an idle replica writes nothing)
        self._failing = False

    @contextlib.asynccontextmanager
    async def entered(self, live: Live) -> AsyncIterator[None]:
        """`live` in the roster while the block runs, when it is a foreground response."""
        if live.request.background:
            yield
            return
        entering = asyncio.ensure_future(self._write(self.store.enter(entry(live, self.replica), TTL_S)))
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):  # a replica shutting down still takes its entry out
                await entering
                await self._write(self.store.leave(self.replica, live.builder.id))

    async def renew(self) -> None:
        """The replica's foreground responses with their counts now, replacing its list in the roster."""
        entries = [entry(lv, self.replica) for lv in list(self.live.values()) if not lv.request.background]
        if not entries and not self._listed:
            return
        await self._write(self.store.renew(self.replica, entries, TTL_S))
        self._listed = bool(entries) or self._failing  # a failed clearing is tried again

    async def elsewhere(self, most: int) -> list[Running]:
        """Up to `most` foreground responses the other replicas run."""
        return await self.store.listed(most, self.replica)

    async def _write(self, step: Awaitable[None]) -> None:
        try:
            await step
        except Exception as exc:
            if not self._failing:
                log.warning("roster.write_failed", error=str(exc) or type(exc).__name__)
            self._failing = True
            return
        if self._failing:
            log.info("roster.write_restored")
            self._failing = False
