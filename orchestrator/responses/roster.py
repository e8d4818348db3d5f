"""This replica's foreground responses in the fleet's roster (`persist.roster`), so every replica's console lists
them beside the background ones, which are in the shared store already.

Nothing is written on a response's path: every `RENEW_S` the replica writes its whole list (each response with
its tool-call count, read off its output then) when it differs from the last one written, and otherwise only
pushes the list's expiry on; an idle replica writes nothing. So another replica's console shows a response
within `RENEW_S` of its start (one shorter than that may never show) and drops it within `RENEW_S` of its end,
and a replica's list lapses `TTL_S` after it stopped renewing (killed, its node lost). Why a tick rather than a
write as each response starts and ends: those two writes, tried first, cost 0.29 (Redis) to 0.41 (SQLite) ms of
CPU a response, against about 5.5 ms for a whole short one; a tick costs 0.2 to 0.7 ms (`bench.orchestrator`'s
roster rows) once per `RENEW_S` whatever the rate. A store that fails is logged once per outage and never fails
a response.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import structlog

from orchestrator.persist.roster import Roster, Running
from orchestrator.responses.live import Live
from toolkit.outage import Outage

log = structlog.get_logger(__name__)
RENEW_S = 2.0
TTL_S = 3 * RENEW_S  # two failed renewals before another replica's console stops listing them
MOST = 1000  # entries a replica lists at most (its longest running): each write and each read stays bounded


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
        self._written: list[tuple[str, int]] | None = []  # (id, tool calls) of the list the store has; None: unsure
        self._outage = Outage(log, "roster.write_failed", "roster.write_restored")

    async def renew(self) -> None:
        """The replica's foreground responses now: written when the list changed, else its expiry pushed on."""
        running = [lv for lv in list(self.live.values()) if not lv.request.background]  # in the order they started
        entries = [entry(lv, self.replica) for lv in running[:MOST]]
        shown = [(e.id, e.tool_calls) for e in entries]
        if shown == self._written and (not entries or await self._write(self.store.extend(self.replica, TTL_S))):
            return
        self._written = shown if await self._write(self.store.renew(self.replica, entries, TTL_S)) else None

    async def elsewhere(self, most: int) -> list[Running]:
        """Up to `most` foreground responses the other replicas run."""
        return await self.store.listed(most, self.replica)

    async def _write(self, step: Awaitable[bool | None]) -> bool:
        """Whether the store took `step` (an extend of a list the store lost is not taken); a failure is logged
        once until a write gets through again."""
        through, taken = await self._outage.step(step)
        return through and taken is not False
