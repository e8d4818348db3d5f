"""Settling a response once its run ended, whatever the end: the metrics told, its items added to its
conversation, its record stored and indexed, its tool results kept, its tool sessions kept until idle or cleaned
up, then its slot, its conversation and its waiters released."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from orchestrator import harmony as h
from orchestrator.conversations import Conversations
from orchestrator.persist import Record, Store
from orchestrator.request import references
from orchestrator.responses.live import Live
from orchestrator.responses.prepare import scoped
from orchestrator.responses.run import Run
from orchestrator.tools import cleanup_sessions

log = structlog.get_logger(__name__)

Settled = Callable[[str, str, dict[str, Any] | None, list[tuple[str, str]]], None]
"""(owner, status, usage, [(namespace, outcome)]) -> None: told of each response that ends (the metrics, the
usage per key)."""


class Settler:
    """Writes what a finished response leaves to the stores, and takes it off the replica's `live` responses."""

    def __init__(
        self, store: Store, conversations: Conversations, live: dict[str, Live], on_settled: Settled | None = None
    ) -> None:
        self.store, self.conversations, self.live, self.on_settled = store, conversations, live, on_settled

    async def settle(self, live: Live, r: Run, n_head: int, items: list[dict]) -> None:
        """Keep what the response left (its conversation's items, its record, its tool results and sessions),
        then give back what it held; a write that fails is told to the caller (`Live.unsaved`), never raised."""
        b, req, held = live.builder, live.request, live.checkpoint
        status = b.body["status"]
        logged = held is not None and await held.close()  # no checkpoint after the settled record; events stored
        kept = req.store and not (held is not None and held.lost)  # lost: another replica goes on with it
        if not kept and req.store:
            b.leave()
        if self.on_settled is not None and (kept or not req.store):
            self.on_settled(live.owner, status, b.body.get("usage"), r.tools.log)
        saving: str | None = None  # what the caller was promised and is being written, while it is
        try:
            state = {"calls": r.tools.calls, "pending": r.tools.pending, "pages": r.tools.pages}
            if live.conversation is not None and status in ("completed", "incomplete"):
                saving = f"added to conversation {live.conversation.id}"
                await self.conversations.append(live.conversation, items + b.body["output"], state)
            live.record = Record(
                b.id, r.conversation, b.body, items, h.dump(r.messages[n_head:]), b.events, state, live.owner
            )
            if kept:
                saving = "stored"
                await self.store.put(dataclasses.replace(live.record, events=[]) if logged else live.record)
            saving = None
            if kept:
                if held is not None:  # stored finished: no replica is to adopt it
                    await held.release()
                await references.index(self.store, live.record)
            lives_on = req.store or live.conversation is not None or live.kept is not None
            if r.tools.results and lives_on:  # for client-kept history
                await self.store.put_results({scoped(live.owner, k): v for k, v in r.tools.results.items()})
            if r.sessions.used and lives_on and not live.cut_call:  # kept until idle (the reaper frees them)
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
