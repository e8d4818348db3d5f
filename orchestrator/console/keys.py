"""`/console/keys`: usage per API key, fleet-wide (every replica adds its counts to the shared store: `usage`):
requests, responses, tokens in and out, tool calls, each limit hit by kind, and the bytes the key keeps in files
and vector stores. A key is shown by its id (`guard.auth.key_id`), never the key.

Sorted and filtered by query parameters, like the other pages; one row per key (the keys file bounds them)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.parts import Parts
from orchestrator.console.render import page, to
from orchestrator.errors import StoreUnavailable
from orchestrator.usage import LIMIT_KINDS
from orchestrator.vector_stores.ingest import used_bytes

COUNTERS = ("requests", "responses", "tokens_in", "tokens_out", "tool_calls")
SORTS = (*COUNTERS, "key", "limits", "file_bytes", "vector_bytes")


async def _stored(parts: Parts, owner: str) -> dict[str, int]:
    objects = parts.deps.files.objects
    files = sum(int(f.get("bytes", 0)) for f in await objects.owned("file", owner))
    return {"file_bytes": files, "vector_bytes": await used_bytes(objects, owner)}


async def key_rows(parts: Parts) -> list[dict[str, Any]]:
    """One row per key configured or counted: its counts (0 where none yet) and stored bytes."""
    counted = await parts.deps.usage.totals()
    rows = []
    configured = parts.clients
    for owner in sorted(configured | set(counted)):
        counts = counted.get(owner, {})
        limits = {kind: counts.get(f"limit:{kind}", 0) for kind in LIMIT_KINDS}
        row = {"key": owner, "configured": owner in configured, "limits_by": limits, "limits": sum(limits.values())}
        rows.append(row | {c: counts.get(c, 0) for c in COUNTERS} | await _stored(parts, owner))
    return rows


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/keys")
    async def keys_page(request: Request, q: str = "", sort: str = "requests", desc: bool = True) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        try:
            rows, error = await key_rows(parts), None
        except StoreUnavailable as exc:
            rows, error = [], str(exc)
        needle = q.strip().lower()
        shown = [r for r in rows if needle in r["key"].lower()]
        shown.sort(key=lambda r: r[sort if sort in SORTS else "requests"], reverse=desc)
        return page(request, "keys.html", user=session, rows=shown, q=q, sort=sort, desc=desc, error=error)
