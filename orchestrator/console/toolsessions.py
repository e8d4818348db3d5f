"""`/console/sessions`: the sandbox sessions of every tool replica, as the gateway gathers them (owner, how the
session is named, idle time, age, memory where sampled, last snapshot where snapshots are on), with end-session.

Sorted, filtered and paged by query parameters, so it reads the same without JavaScript. A replica that did not
answer (gone mid-page, or not a toolfleet tool server) is a message in its own row of the replicas table; the
other replicas' sessions are still listed.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.gwadmin import GatewayDown
from orchestrator.console.parts import Parts, posted
from orchestrator.console.render import page, to, told

log = structlog.get_logger(__name__)
PAGE_ROWS = 50
SORTS = ("idle_s", "age_s", "memory_bytes", "owner", "session", "namespace")
MISSING_LAST = {"memory_bytes": -1.0}  # sessions without a sampled memory sort below every sampled one


def flatten(found: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sessions as rows (namespace and replica on each) and one summary per replica: its count or error."""
    rows, replicas = [], []
    for namespace, by_replica in sorted(found.items()):
        for url, listed in sorted(by_replica.items()):
            held = listed.get("sessions") or []
            replicas.append({"namespace": namespace, "url": url, "error": listed.get("error"), "held": len(held)})
            replicas[-1] |= {"total": listed.get("total", len(held)), "snapshots": listed.get("snapshots")}
            for s in held:  # fresh from the gateway's JSON: labelled in place, not copied
                s["namespace"], s["replica"] = namespace, url
            rows += held
    return rows, replicas


def _key(sort: str) -> Any:
    column = sort if sort in SORTS else "idle_s"
    missing = MISSING_LAST.get(column, "")
    return lambda r: missing if r.get(column) is None else r[column]


def select(rows: list[dict[str, Any]], q: str, ns: str, sort: str, desc: bool) -> list[dict[str, Any]]:
    """The rows of namespace `ns` (all when empty) matching `q` (in the session, owner or replica), sorted."""
    needle = q.strip().lower()
    found = [
        r
        for r in rows
        if (not ns or r["namespace"] == ns)
        and (not needle or any(needle in str(r.get(c, "")).lower() for c in ("session", "owner", "replica")))
    ]
    return sorted(found, key=_key(sort), reverse=desc)


async def sessions_data(parts: Parts, query: dict[str, str]) -> dict[str, Any] | str:
    """What the page shows for these query parameters, or the message for a page number out of range."""
    try:
        rows, replicas, error = *flatten(await parts.gateway.sessions()), None
    except GatewayDown as exc:
        rows, replicas, error = [], [], str(exc)
    q, ns, sort = query.get("q", ""), query.get("ns", ""), query.get("sort", "idle_s")
    desc = query.get("desc", "true") != "false"
    found = select(rows, q, ns, sort, desc)
    number, last = query.get("page", "1"), max(1, -(-len(found) // PAGE_ROWS))
    if not number.isdigit() or not 1 <= int(number) <= last:
        return f"There is no page {number!r} of sessions: pages 1 to {last}."
    start = (int(number) - 1) * PAGE_ROWS
    shown = found[start : start + PAGE_ROWS]
    namespaces = sorted({r["namespace"] for r in replicas})
    listing = {"rows": shown, "total": len(found), "first": start + 1, "number": int(number), "last": last}
    return {
        "replicas": replicas,
        "namespaces": namespaces,
        "error": error,
        "q": q,
        "ns": ns,
        "sort": sort,
        "desc": desc,
        **listing,
    }


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/sessions")
    async def sessions_page(request: Request) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        data = await sessions_data(parts, dict(request.query_params))
        if isinstance(data, str):
            return page(request, "error.html", 404, user=session, error=data)
        return page(request, "sessions.html", user=session, **data)

    @router.post("/console/sessions/end")
    async def end(request: Request) -> Response:
        checked = await posted(request, parts)
        if isinstance(checked, Response):
            return checked
        admin, fields = checked
        namespace, replica, key = (fields.get(f, "") for f in ("namespace", "replica", "session"))
        try:
            held = await parts.gateway.end_session(namespace, replica, key)
        except GatewayDown as exc:
            return told(request, "/sessions", f"Session {key} was not ended: {exc}")
        log.info("console.session_ended", namespace=namespace, replica=replica, session_id=key, admin=admin.admin)
        words = "ended" if held else "was no longer held (it had ended already); its snapshot, if any, is gone"
        return told(request, "/sessions", f"Session {key} of {namespace} on {replica} {words}.")
