"""`/console/approvals`: tool definitions the gateway holds back per namespace (changed or new since they were
approved), each with a line diff of its approved and pending text, and approve or reject; the definitions an
operator rejected are listed too (the gateway keeps them out until the upstream serves another one)."""

from __future__ import annotations

import difflib
import re
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.gwadmin import GatewayDown
from orchestrator.console.parts import Parts, posted
from orchestrator.console.render import page, to, told

log = structlog.get_logger(__name__)
NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DONE = {"approve": "Approved", "reject": "Rejected"}


def diff(approved: str | None, pending: str) -> list[tuple[str, str]]:
    """The pending text against the approved one as (kind, line) pairs, kind "add", "del", "at" or "same"; a new
    tool (no approved text) is all added."""
    before, after = (approved or "").splitlines(), pending.splitlines()
    lines = difflib.unified_diff(before, after, "approved", "pending", n=2, lineterm="")
    kinds = {"+": "add", "-": "del", "@": "at"}
    return [(kinds.get(line[:1], "same"), line) for line in lines if not line.startswith(("---", "+++"))]


def _tool(name: str, pending_hash: str, state: dict[str, Any]) -> dict[str, Any]:
    """A pending tool's row; no diff when a text is missing (approved before the gateway kept texts)."""
    texts = (state.get("definitions") or {}).get(name) or {}
    approved = (state.get("approved") or {}).get(name)
    known = texts.get("pending") is not None and (approved is None or texts.get("approved") is not None)
    lines = diff(texts.get("approved"), texts["pending"]) if known else []
    return {"tool": name, "approved": approved, "pending": pending_hash, "diff": lines}


def pending(tools: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per namespace with pending or rejected tools: each pending tool's hashes and diff."""
    found = []
    for ns, state in sorted(tools.items()):
        waiting, rejected = state.get("pending") or {}, state.get("rejected") or {}
        if waiting or rejected:
            changes = [_tool(t, h, state) for t, h in sorted(waiting.items())]
            found.append({"namespace": ns, "tools": changes, "rejected": sorted(rejected)})
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
        return page(request, "approvals.html", user=session, namespaces=found, error=error)

    @router.post("/console/approvals/{namespace}/{decision}")
    async def decide(request: Request, namespace: str, decision: str) -> Response:
        checked = await posted(request, parts)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        if decision not in DONE or not NAMESPACE.fullmatch(namespace):
            error = f"{namespace!r}/{decision!r} is not a namespace and approve or reject."
            return page(request, "error.html", 400, user=session, error=error)
        try:
            names = await parts.gateway.decide(namespace, decision)
        except GatewayDown as exc:
            return page(request, "error.html", 502, user=session, error=f"Nothing {DONE[decision].lower()}: {exc}")
        log.info("console.decided", decision=decision, namespace=namespace, tools=names, admin=session.admin)
        decided = ", ".join(names) or "nothing was pending"
        return told(request, "/approvals", f"{DONE[decision]} in {namespace}: {decided}.")
