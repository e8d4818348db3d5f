"""`/console/approvals`: tool definitions the gateway holds back per namespace (changed or new since they were
approved), with the approved and the pending definition's hash side by side, and approve.

The gateway keeps only each definition's hash, not its text, so the page shows which tools changed, not a line
diff of their definitions; and it has no reject: a pending definition stays refused until approved (or until the
upstream serves the approved one again)."""

from __future__ import annotations

import re
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.gwadmin import GatewayDown
from orchestrator.console.parts import Parts, posted
from orchestrator.console.render import page, to

log = structlog.get_logger(__name__)
NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def pending(tools: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per namespace with pending tools: each tool's approved hash (None: a new tool) and pending one."""
    found = []
    for ns, state in sorted(tools.items()):
        approved, waiting = state.get("approved") or {}, state.get("pending") or {}
        if waiting:
            changes = [{"tool": t, "approved": approved.get(t), "pending": h} for t, h in sorted(waiting.items())]
            found.append({"namespace": ns, "tools": changes, "approved_count": len(approved)})
    return found


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/approvals")
    async def approvals(request: Request) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        try:
            found, error = pending(await parts.gateway.tools()), None
        except GatewayDown as exc:
            found, error = [], str(exc)
        notice = request.query_params.get("notice")
        return page(request, "approvals.html", user=session, namespaces=found, error=error, notice=notice)

    @router.post("/console/approvals/{namespace}/approve")
    async def approve(request: Request, namespace: str) -> Response:
        checked = await posted(request, parts)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        if not NAMESPACE.fullmatch(namespace):
            return page(request, "error.html", 400, user=session, error=f"{namespace!r} is not a namespace name.")
        try:
            names = await parts.gateway.approve(namespace)
        except GatewayDown as exc:
            return page(request, "error.html", 502, user=session, error=f"Nothing approved: {exc}")
        log.info("console.approved", namespace=namespace, tools=names, admin=session.admin)
        return to("/approvals", f"Approved in {namespace}: {', '.join(names) or 'nothing was pending'}.")
