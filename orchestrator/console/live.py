"""`/console/live`: the responses running on this replica (key, model, status, turns' tool calls, elapsed), with
cancel for background ones, and the recent tool calls (`calls.py` streams the new ones). Sorts and filters by
query parameters, so it reads the same without JavaScript."""

from __future__ import annotations

import time
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.callfeed import KEEP
from orchestrator.console.parts import Parts, posted
from orchestrator.console.render import page, to
from orchestrator.errors import RequestError
from orchestrator.responses.live import Live

log = structlog.get_logger(__name__)
PAGE_ROWS = 50
SORTS = {"elapsed": "elapsed", "id": "id", "model": "model", "key": "key", "tool_calls": "tool_calls"}


def _row(live: Live, now: float) -> dict[str, Any]:
    body = live.builder.body
    output = body.get("output") or []
    calls = [
        i for i in output if isinstance(i, dict) and str(i.get("type", "")).endswith("_call")
    ]  # every tool call kind
    created = float(body.get("created_at") or now)
    return {
        "id": body.get("id", ""),
        "key": live.owner,
        "model": body.get("model") or "",
        "status": body.get("status", ""),
        "background": bool(live.request.background),
        "tool_calls": len(calls),
        "created": created,
        "elapsed": now - created,
    }


def rows(parts: Parts, q: str, sort: str, desc: bool) -> list[dict[str, Any]]:
    """The running responses matching `q` (in the id, key or model), sorted by a `SORTS` column."""
    now = time.time()
    found = [_row(live, now) for live in list(parts.deps.service.live.values())]
    needle = q.strip().lower()
    if needle:
        found = [r for r in found if any(needle in str(r[c]).lower() for c in ("id", "key", "model"))]
    return sorted(found, key=lambda r: r[SORTS.get(sort, "elapsed")], reverse=desc)


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/live")
    async def live_page(request: Request, q: str = "", sort: str = "elapsed", desc: bool = True) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        found = rows(parts, q, sort, desc)
        number = request.query_params.get("page", "1")
        last = max(1, -(-len(found) // PAGE_ROWS))
        if not number.isdigit() or not 1 <= int(number) <= last:
            error = f"There is no page {number!r} of running responses: pages 1 to {last}."
            return page(request, "error.html", 404, user=session, error=error)
        start = (int(number) - 1) * PAGE_ROWS
        shown = found[start : start + PAGE_ROWS]
        listing = {"rows": shown, "total": len(found), "first": start + 1, "number": int(number), "last": last}
        notice = request.query_params.get("notice")
        calls = {"calls": list(parts.deps.service.calls.recent), "keep": KEEP}
        return page(request, "live.html", user=session, q=q, sort=sort, desc=desc, notice=notice, **listing, **calls)

    @router.post("/console/live/{rid}/cancel")
    async def cancel(request: Request, rid: str) -> Response:
        checked = await posted(request, parts)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        live = parts.deps.service.live.get(rid)
        if live is None:
            message = f"No response {rid!r} is running on this replica: it finished, or the id is unknown."
            return page(request, "error.html", 404, user=session, error=message)
        try:
            body = await parts.deps.service.responses.cancel(rid, live.owner)
        except RequestError as exc:
            return page(request, "error.html", exc.status, user=session, error=f"{rid} was not cancelled: {exc}")
        log.info("console.cancelled", response_id=rid, admin=session.admin)
        return to("/live", f"{rid} is now {body.get('status')}.")
