"""`/console/traces`: one response's path as the orchestrator records it (its stored record or, while it runs,
its live body): status, key, model, usage, and each output item in order (messages, reasoning, every tool
call with its namespace or server, tool and status).

The fleet keeps no span store: spans go over OTLP to the operator's collector (`--otlp-endpoint`), where
the gateway's hops and the tools' spans of the same trace are read; the page says so rather than scrape logs.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.parts import Parts
from orchestrator.console.render import page, to
from orchestrator.errors import StoreUnavailable

RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9]{1,64}")


def _named(item: dict[str, Any]) -> str:
    action = item.get("action")
    return str(item.get("name") or (action.get("type") if isinstance(action, dict) else "") or "")


def steps(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Each output item as one step: its kind, where it went (namespace, server or role), what and its status."""
    return [
        {
            "kind": str(item.get("type", "")),
            "where": item.get("namespace") or item.get("server_label") or item.get("role") or "",
            "what": _named(item),
            "status": item.get("status", ""),
        }
        for item in body.get("output") or []
        if isinstance(item, dict)
    ]


async def _body(parts: Parts, rid: str) -> tuple[dict[str, Any], str] | None:
    """The response's body and owner, live first (it may not be stored yet), then the store."""
    if (live := parts.deps.service.live.get(rid)) is not None:
        return live.builder.body, live.owner
    record = await parts.deps.service.store.get(rid)
    return (record.body, record.owner) if record is not None else None


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/traces")
    async def traces(request: Request, id: str = "") -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        rid = id.strip()
        if not rid:
            return page(request, "traces.html", user=session, rid="", response=None)
        if not RESPONSE_ID.fullmatch(rid):
            error = f"{rid!r} is not a response id (resp_ and letters or digits)."
            return page(request, "traces.html", 400, user=session, rid=rid, response=None, error=error)
        try:
            found = await _body(parts, rid)
        except StoreUnavailable as exc:
            return page(request, "traces.html", 503, user=session, rid=rid, response=None, error=str(exc))
        if found is None:
            error = f"No response {rid!r} is running or stored: the id is unknown, expired or deleted."
            return page(request, "traces.html", 404, user=session, rid=rid, response=None, error=error)
        body, owner = found
        return page(request, "traces.html", user=session, rid=rid, response=body, owner=owner, steps=steps(body))
