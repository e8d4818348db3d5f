"""The console's routes, one module per page, and its static files (CSS, no script)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from orchestrator.api.deps import Deps
from orchestrator.console import approvals, fleet, live, login, toolsessions, traces
from orchestrator.console.gwadmin import GatewayAdmin
from orchestrator.console.parts import Parts
from orchestrator.console.render import HERE
from orchestrator.console.session import ConsoleSessions
from orchestrator.guard.auth import load_admin_keys

PAGES = (login, fleet, live, toolsessions, approvals, traces)


def mount(app: FastAPI, deps: Deps) -> None:
    """The console's pages and `/console/static` on the app."""
    settings = deps.settings
    parts = Parts(
        deps, ConsoleSessions(load_admin_keys(settings)), GatewayAdmin(settings.tools_url, settings.gateway_admin_token)
    )
    router = APIRouter(include_in_schema=False, lifespan=parts.gateway.running)
    for module in PAGES:
        module.routes(router, parts)
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
