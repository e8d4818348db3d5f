"""`/console/fleet`: this replica (version, uptime, responses running), its workers (health, model, load,
prefix-cache hit rate) and the gateway's namespaces with every replica's state and the tools pending."""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.gwadmin import GatewayDown
from orchestrator.console.parts import Parts
from orchestrator.console.render import page, to

VERSION = version("toolfleet")


def _workers(parts: Parts) -> list[dict[str, Any]]:
    pool = parts.deps.pool
    if pool is None:
        return []
    return [
        {
            "url": w.url,
            "healthy": w.healthy,
            "model": w.model or parts.deps.settings.model or "(not reported yet)",
            "api": w.api or "auto",
            "outstanding": w.outstanding,
            "hits": w.prefix_cache.get("hits"),
            "queries": w.prefix_cache.get("queries"),
        }
        for w in pool.workers
    ]


async def fleet_data(parts: Parts) -> dict[str, Any]:
    """Everything the page shows, also what `bench/console.py` times apart from the rendering."""
    replica = {
        "version": VERSION,
        "uptime_s": time.time() - parts.started,
        "running": len(parts.deps.service.live),
    }
    try:
        gateway, gateway_error = await parts.gateway.status(), None
    except GatewayDown as exc:
        gateway, gateway_error = {}, str(exc)
    namespaces = sorted(gateway.get("namespaces", {}).items())
    return {"replica": replica, "workers": _workers(parts), "namespaces": namespaces, "gateway_error": gateway_error}


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console")
    async def home() -> Response:
        return to("/fleet")

    @router.get("/console/fleet")
    async def fleet(request: Request) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        data = await fleet_data(parts)
        return page(request, "fleet.html", user=session, gateway_url=parts.gateway.url, **data)
