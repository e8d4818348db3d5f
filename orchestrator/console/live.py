"""`/console/live`: the responses running in the fleet (key, model, status, turns' tool calls, elapsed, replica),
with cancel for background ones, and the recent tool calls (`calls.py` streams the new ones). Sorts and filters by
query parameters, so it reads the same without JavaScript.

The fleet's are this replica's own (foreground and background), the background responses other replicas
hold in the shared store (`Store.held`), read from their last checkpoint, and the foreground ones other replicas
keep in the fleet's roster (`responses.roster`: as their replica last wrote its list, every 2 s). A cancel of
another replica's background response goes through the store (`LiveResponses.cancel`), to the replica running
it. A foreground response is not cancelled from here, on any replica: it is its caller's, which ends it by
going away (the API refuses to cancel one too), so its row says so instead of offering a button."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.callfeed import KEEP, ToolCallSeen
from orchestrator.console.parts import Parts, posted
from orchestrator.console.render import page, to, told
from orchestrator.errors import RequestError, StoreUnavailable
from orchestrator.persist.roster import Running
from orchestrator.responses.live import RUNNING
from orchestrator.responses.roster import RENEW_S, tool_calls

log = structlog.get_logger(__name__)
PAGE_ROWS = 50
FLEET_MOST = 1000  # responses other replicas run listed at most, of each kind (background, foreground)
HERE = "this replica"
SORTS = ("elapsed", "id", "model", "key", "tool_calls", "replica")
CALL_SORTS = ("at", "namespace", "tool", "latency_ms", "outcome")


def _row(body: dict[str, Any], owner: str, background: bool, replica: str, now: float) -> dict[str, Any]:
    created = float(body.get("created_at") or now)
    return {
        "id": body.get("id", ""),
        "key": owner,
        "model": body.get("model") or "",
        "status": body.get("status", ""),
        "background": background,
        "tool_calls": tool_calls(body),
        "created": created,
        "elapsed": now - created,
        "replica": replica,
    }


def _listed(entry: Running, now: float) -> dict[str, Any]:
    """A foreground response of another replica, as its roster entry has it."""
    body = {"id": entry.id, "model": entry.model, "status": "in_progress", "created_at": entry.created}
    return {**_row(body, entry.owner, False, entry.replica, now), "tool_calls": entry.tool_calls}


async def _elsewhere(parts: Parts, now: float) -> list[dict[str, Any]]:
    """The responses other replicas run: the background ones they hold in the shared store, as their last
    checkpoint shows them, and the foreground ones in the fleet's roster."""
    service = parts.deps.service
    held, foreground = await asyncio.gather(
        service.store.held(FLEET_MOST, service.holder), service.roster.elsewhere(FLEET_MOST)
    )
    ids = [rid for rid in held if rid not in service.live]
    records = await asyncio.gather(*(service.store.get(rid) for rid in ids))
    running = [r for r in records if r is not None and r.body.get("status") in RUNNING]
    return [_row(r.body, r.owner, True, held[r.id], now) for r in running] + [_listed(e, now) for e in foreground]


async def rows(parts: Parts, q: str, sort: str, desc: bool) -> tuple[list[dict[str, Any]], str | None]:
    """The fleet's running responses matching `q` (in the id, key, model or replica), sorted by a `SORTS`
    column; and why the other replicas' are missing, if they are (the shared store did not answer)."""
    now = time.time()
    lives = list(parts.deps.service.live.values())
    found = [_row(lv.builder.body, lv.owner, bool(lv.request.background), HERE, now) for lv in lives]
    try:
        found += await _elsewhere(parts, now)
        error = None
    except StoreUnavailable as exc:
        error = f"Only this replica's responses are listed: {exc}"
    needle = q.strip().lower()
    if needle:
        found = [r for r in found if any(needle in str(r[c]).lower() for c in ("id", "key", "model", "replica"))]
    return sorted(found, key=lambda r: r[sort if sort in SORTS else "elapsed"], reverse=desc), error


def recent(parts: Parts, cq: str, csort: str, cdesc: bool) -> list[ToolCallSeen]:
    """The recent tool calls matching `cq` (in the namespace, tool, outcome, replica or response), sorted by a
    `CALL_SORTS` field."""
    needle = cq.strip().lower()
    calls = [
        c
        for c in parts.deps.service.calls.recent
        if not needle or any(needle in v.lower() for v in (c.namespace, c.tool, c.outcome, c.replica, c.response_id))
    ]
    return sorted(calls, key=lambda c: getattr(c, csort if csort in CALL_SORTS else "at"), reverse=cdesc)


async def _cancel(parts: Parts, rid: str) -> dict[str, Any] | None:
    """Cancel `rid` wherever it runs (another replica's through the shared store); None: it runs nowhere. A
    foreground response is refused alike on every replica."""
    service = parts.deps.service
    if (live := service.live.get(rid)) is not None:
        return await service.responses.cancel(rid, live.owner)
    record = await service.store.get(rid)
    if record is not None and record.body.get("status") in RUNNING:
        return await service.responses.cancel(rid, record.owner)
    if any(e.id == rid for e in await service.roster.elsewhere(FLEET_MOST)):  # as the replica running it answers
        raise RequestError("only background responses can be cancelled", None, 400)
    return None


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/live")
    async def live_page(
        request: Request,
        q: str = "",
        sort: str = "elapsed",
        desc: bool = True,
        cq: str = "",
        csort: str = "at",
        cdesc: bool = True,
    ) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        found, store_error = await rows(parts, q, sort, desc)
        number = request.query_params.get("page", "1")
        last = max(1, -(-len(found) // PAGE_ROWS))
        if not number.isdigit() or not 1 <= int(number) <= last:
            error = f"There is no page {number!r} of running responses: pages 1 to {last}."
            return page(request, "error.html", 404, user=session, error=error)
        start = (int(number) - 1) * PAGE_ROWS
        shown = found[start : start + PAGE_ROWS]
        listing = {"rows": shown, "total": len(found), "first": start + 1, "number": int(number), "last": last}
        ordered = {"cq": cq, "csort": csort, "cdesc": cdesc, "calls": recent(parts, cq, csort, cdesc)}
        calls = {**ordered, "keep": KEEP, "error": store_error, "here": HERE, "renew_s": RENEW_S}
        return page(request, "live.html", user=session, q=q, sort=sort, desc=desc, **listing, **calls)

    @router.post("/console/live/{rid}/cancel")
    async def cancel(request: Request, rid: str) -> Response:
        checked = await posted(request, parts)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        try:
            body = await _cancel(parts, rid)
        except RequestError as exc:
            return page(request, "error.html", exc.status, user=session, error=f"{rid} was not cancelled: {exc}")
        if body is None:
            message = f"No response {rid!r} is running in the fleet: it finished, or the id is unknown."
            return page(request, "error.html", 404, user=session, error=message)
        log.info("console.cancelled", response_id=rid, admin=session.admin)
        return told(request, "/live", f"{rid} is now {body.get('status')}.")
