"""The orchestrator's app, assembled: its parts built once, the routers of `api/` included in order, the
middleware and the lifespan. Every error becomes an OpenAI-shaped body in one place (`errors.error_response`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

import orchestrator.api.chat
import orchestrator.api.containers
import orchestrator.api.context
import orchestrator.api.conversations
import orchestrator.api.files
import orchestrator.api.responses
import orchestrator.api.service
import orchestrator.api.vector_stores
import orchestrator.api.websocket
import orchestrator.console.router
from orchestrator.api.deps import Deps
from orchestrator.console.render import ConsoleHeaders
from orchestrator.containers import Containers
from orchestrator.errors import ERRORS, RequestError, StoreUnavailable, error_response
from orchestrator.files import Files
from orchestrator.guard.auth import ApiKeys, AuthMiddleware, load_keys, warn_if_open
from orchestrator.guard.bodies import BodyLimitMiddleware, BodyLimits
from orchestrator.guard.mcp_policy import McpPolicy
from orchestrator.kinds import SANDBOX_NAMESPACES
from orchestrator.metrics import LatencyMiddleware, OrchestratorMetrics
from orchestrator.persist import Stores, open_stores
from orchestrator.responses.service import ResponsesService
from orchestrator.responses.settle import Settled
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Endpoints, cleanup_sessions, close_pools
from orchestrator.usage import Usage
from orchestrator.worker.affinity import Affinity, MemoryAffinity, NoAffinity, RedisAffinity
from orchestrator.worker.client import Chat, Generate, WorkerPool
from toolkit.tracing import TracingMiddleware

RESOURCES = (
    orchestrator.api.files,
    orchestrator.api.containers,
    orchestrator.api.vector_stores,
    orchestrator.api.responses,
    orchestrator.api.chat,
    orchestrator.api.conversations,
    orchestrator.api.context,
    orchestrator.api.websocket,
    orchestrator.api.service,
)
"""Included in this order: the routes match in it, the OpenAPI document lists them in it, and the files' and
containers' router lifespans (their prune jobs) start in it. Imported by full name: `create_app`'s `service` and
`chat` are other things."""


def create_app(
    settings: OrchestratorSettings | None = None,
    *,
    generate: Generate | None = None,
    stores: Stores | None = None,
    pool: WorkerPool | None = None,
    chat: Chat | None = None,
) -> FastAPI:
    """The app; tests pass `generate` / `chat` (e.g. a pool over a scripted worker) and the stores."""
    settings = settings or OrchestratorSettings()
    if generate is None:
        pool = pool or _pool(settings)
        generate = pool.generate
    stores = stores if stores is not None else open_stores(settings)
    endpoints = Endpoints(settings.tools_url, settings.endpoint_overrides())
    sandboxes = {url for ns in SANDBOX_NAMESPACES if (url := endpoints.url_for(ns)) is not None}
    files = Files.from_settings(stores.objects, settings)
    # a container's tool sessions (in its sandboxes) go with it
    containers = Containers.from_settings(files, settings, on_drop=lambda cid: cleanup_sessions(cid, sandboxes))
    metrics = OrchestratorMetrics(pool, lambda: len(service.live))  # `service` is read when the gauge is
    usage = Usage(stores.usage, metrics.count_key)
    service = ResponsesService(
        settings,
        generate=generate,
        stores=stores,
        endpoints=endpoints,
        policy=McpPolicy.from_settings(settings),
        containers=containers,
        chat=chat or (pool.chat if pool is not None else None),
        api_for=pool.api_for if pool is not None else None,
        count_chat=pool.count_chat if pool is not None else None,
        on_settled=_settled(metrics, usage),
    )
    service.limits.count_refusals(usage.refused)
    keys = ApiKeys(load_keys(settings))
    lifespan = _lifespan(settings, keys, stores, pool, service, usage)
    app = FastAPI(title="toolfleet orchestrator", lifespan=lifespan, responses=ERRORS)
    _wrap(app, settings, keys, service, metrics, usage)
    app.state.service = service
    app.state.stores = stores
    app.state.files = files
    app.state.containers = containers
    deps = Deps(settings, service, pool, files, containers, metrics, usage)
    for resource in RESOURCES:
        app.include_router(resource.router(deps))
    orchestrator.console.router.mount(app, deps)
    return app


def _settled(metrics: OrchestratorMetrics, usage: Usage) -> Settled:
    """What a finished response tells: the metrics (fleet totals) and the usage of its key."""

    def settled(owner: str, status: str, used: dict[str, Any] | None, calls: list[tuple[str, str]]) -> None:
        metrics.settled(status, used, calls)
        usage.settled(owner, used, calls)

    return settled


def _pool(settings: OrchestratorSettings) -> WorkerPool:
    return WorkerPool(
        settings.worker_urls,
        model=settings.model,
        api=settings.worker_api,
        apis=settings.worker_apis,
        health_interval_s=settings.health_interval_s,
        down_after=settings.worker_down_after,
        keepalive_expiry_s=settings.keepalive_expiry_s,
        affinity=_affinity(settings),
        spill_at=settings.affinity_spill_at,
    )


def _affinity(settings: OrchestratorSettings) -> Affinity:
    """The affinity map: none when off, Redis's (shared by the replicas) with a Redis store, else in memory."""
    if not settings.affinity:
        return NoAffinity()
    if settings.store == "redis":
        url = settings.redis_url or "redis://127.0.0.1:6379/0"
        return RedisAffinity(url, settings.redis_prefix, settings.affinity_size, settings.affinity_ttl_s)
    return MemoryAffinity(settings.affinity_size, settings.affinity_ttl_s)


def _lifespan(
    settings: OrchestratorSettings,
    keys: ApiKeys,
    stores: Stores,
    pool: WorkerPool | None,
    service: ResponsesService,
    usage: Usage,
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Start-up checks the store and warns of an open service; the pool and the service run while the app does."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await stores.check()  # a Redis store that cannot be reached stops the start-up with a clear error
        warn_if_open(settings, keys)
        if pool is not None:
            await pool.start()
        try:
            async with service.running(), usage.running():
                yield
        finally:
            if pool is not None:
                await pool.aclose()
            close_pools()
            await stores.aclose()

    return lifespan


def _wrap(
    app: FastAPI,
    settings: OrchestratorSettings,
    keys: ApiKeys,
    service: ResponsesService,
    metrics: OrchestratorMetrics,
    usage: Usage,
) -> None:
    """The middleware, each added outside the one before, and the one error handler."""
    rate, token = service.limits.rate, settings.metrics_token
    app.add_middleware(AuthMiddleware, keys=keys, rate=rate, metrics_token=token, counted=usage.request)
    app.add_middleware(BodyLimitMiddleware, limits=BodyLimits(settings.max_body_bytes, settings.max_file_bytes))
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(ConsoleHeaders)  # outside the body limit and auth: their refusals carry the CSP too
    app.add_middleware(TracingMiddleware)  # outermost: every request is a span, auth refusals too
    # The known kinds are registered apart from `Exception`, whose handler Starlette runs as a 500 path.
    for kind in (RequestError, StoreUnavailable, ValidationError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, _error)


async def _error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc, f"{request.method} {request.url.path}")
