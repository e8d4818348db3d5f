"""The console's routes, one module per page, and its static files (CSS, no script)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from orchestrator.api.deps import Deps
from orchestrator.console import approvals, fleet, keys, live, login, toolsessions, traces
from orchestrator.console.gwadmin import GatewayAdmin
from orchestrator.console.parts import Parts
from orchestrator.console.render import HERE
from orchestrator.console.session import ConsoleSessions
from orchestrator.guard.auth import ApiKeys, load_admin_keys, load_keys

PAGES = (login, fleet, live, toolsessions, approvals, keys, traces)


def mount(app: FastAPI, deps: Deps) -> None:
    """The console's pages and `/console/static` on the app."""
    settings = deps.settings
    gateway = GatewayAdmin(settings.tools_url, settings.gateway_admin_token)
    clients = ApiKeys(load_keys(settings)).ids()
    parts = Parts(deps, ConsoleSessions(load_admin_keys(settings)), gateway, clients)
    router = APIRouter(include_in_schema=False, lifespan=parts.gateway.running)
    for module in PAGES:
        module.routes(router, parts)
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
