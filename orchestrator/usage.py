"""Usage per API key, counted by this replica and added to the store every replica shares (`persist.usage`),
so each replica's console shows the whole fleet's: requests, responses, tokens in and out, tool calls, and each
limit hit by kind (`limit:rate`, `limit:running`, `limit:sockets`: the 429s of `guard.limits`).

Counting is synchronous and in memory (it runs on the request's path, where a store write would add a round
trip to every request); `running` adds what was counted to the store every `FLUSH_S` and once more as the app
stops, and a reader (`totals`) adds it first, so what it reads includes this replica's latest."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import structlog

from orchestrator.errors import StoreUnavailable
from orchestrator.persist.usage import Counts, UsageStore

log = structlog.get_logger(__name__)
FLUSH_S = 2.0
LIMIT_KINDS = ("rate", "running", "sockets")


class Usage:
    def __init__(self, store: UsageStore, observe: Callable[[str, str, int], None] = lambda k, c, n: None) -> None:
        self.store = store
        self.observe = observe  # told of each count as it is made (the per-key Prometheus counter)
        self._pending: dict[str, Counter[str]] = {}

    def _add(self, owner: str, counts: dict[str, int]) -> None:
        self._pending.setdefault(owner, Counter()).update({name: n for name, n in counts.items() if n})

    def count(self, owner: str, **counts: int) -> None:
        self._add(owner, counts)
        for name, n in counts.items():
            if n:
                self.observe(owner, name, n)

    def request(self, owner: str) -> None:
        self.count(owner, requests=1)

    def refused(self, owner: str, kind: str) -> None:
        """One limit hit (a 429) of `kind` (`LIMIT_KINDS`)."""
        self.count(owner, **{f"limit:{kind}": 1})

    def settled(self, owner: str, usage: dict[str, Any] | None, tool_calls: list[tuple[str, str]]) -> None:
        """One finished response: its tokens and its tool calls."""
        usage = usage or {}
        tokens = {"tokens_in": usage.get("input_tokens") or 0, "tokens_out": usage.get("output_tokens") or 0}
        self.count(owner, responses=1, tool_calls=len(tool_calls), **tokens)

    async def flush(self) -> None:
        """Add what was counted since the last flush to the store; on a store failure it is kept for the next."""
        taken: Counts = {owner: dict(c) for owner, c in self._pending.items() if c}
        self._pending = {}
        if not taken:
            return
        try:
            await self.store.add(taken)
        except BaseException:
            for owner, named in taken.items():
                self._add(owner, named)  # counted once already: kept for the next flush, not observed again
            raise

    async def totals(self) -> Counts:
        """Every key's counts, fleet-wide, this replica's latest included."""
        await self.flush()
        return await self.store.read()

    async def _flush_forever(self) -> None:
        while True:
            await anyio.sleep(FLUSH_S)
            try:
                await self.flush()
            except StoreUnavailable as exc:
                log.warning("usage.flush_failed", error=str(exc))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The flush loop while the app serves, and a last flush as it stops."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._flush_forever)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(StoreUnavailable):
                    await self.flush()
