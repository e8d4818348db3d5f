"""The console's routes, one module per page, and its static files (the stylesheet and the Live page's script)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from orchestrator.api.deps import Deps
from orchestrator.console import approvals, calls, fleet, keys, live, login, toolsessions, traces
from orchestrator.console.gwadmin import GatewayAdmin
from orchestrator.console.parts import Parts
from orchestrator.console.relay import RedisRelay
from orchestrator.console.render import HERE
from orchestrator.console.session import ConsoleSessions
from orchestrator.console.throttle import FleetThrottle, LoginThrottle
from orchestrator.guard.auth import ApiKeys, load_admin_keys, load_keys
from orchestrator.persist.redis import RedisStores

PAGES = (login, fleet, live, calls, toolsessions, approvals, keys, traces)


def mount(app: FastAPI, deps: Deps) -> None:
    """The console's pages and `/console/static` on the app, and while it runs the gateway admin client and,
    with a Redis store, the tool-call relay (and fleet-wide login bounds)."""
    settings = deps.settings
    gateway = GatewayAdmin(settings.tools_url, settings.gateway_admin_token)
    clients = ApiKeys(load_keys(settings)).ids()
    parts = Parts(deps, ConsoleSessions(load_admin_keys(settings)), gateway, clients, throttle=_throttle(app, deps))
    relay = _relay(app, parts)

    @contextlib.asynccontextmanager
    async def running(app: FastAPI) -> AsyncIterator[None]:
        async with parts.gateway.running(app), relay.running() if relay else contextlib.nullcontext():
            yield

    router = APIRouter(include_in_schema=False, lifespan=running)
    for module in PAGES:
        module.routes(router, parts)
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")


def _throttle(app: FastAPI, deps: Deps) -> FleetThrottle:
    """Failed logins counted by this replica, and with a Redis store by the whole fleet (`throttle.py`)."""
    stores = app.state.stores
    if not isinstance(stores, RedisStores):
        return FleetThrottle(LoginThrottle())
    return FleetThrottle(LoginThrottle(), stores.connection.client, deps.settings.redis_prefix)


def _relay(app: FastAPI, parts: Parts) -> RedisRelay | None:
    """With a Redis store, the replica's tool-call feed made fleet-wide (`relay.py`); else it stays its own."""
    stores = app.state.stores
    if not isinstance(stores, RedisStores):
        return None
    feed = parts.deps.service.calls
    relay = RedisRelay(stores.connection.client, f"{parts.deps.settings.redis_prefix}toolcalls", feed)
    feed.relay = relay
    return relay
