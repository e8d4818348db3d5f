"""HTTP routes of the orchestrator; every error becomes an OpenAI-shaped error body in one place."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

import orchestrator.api.containers
import orchestrator.api.files
from orchestrator import context_routes, conversation_routes, websocket_routes
from orchestrator.api.deps import Deps
from orchestrator.auth import ApiKeys, AuthMiddleware, load_keys, warn_if_open
from orchestrator.bodies import BodyLimitMiddleware, BodyLimits
from orchestrator.chat_completions import ChatRelay
from orchestrator.containers import Containers
from orchestrator.errors import ERRORS, RequestError, StoreUnavailable, error_response
from orchestrator.files import Files
from orchestrator.mcp_policy import McpPolicy
from orchestrator.metrics import LatencyMiddleware, OrchestratorMetrics
from orchestrator.schema import ResponsesRequest, json_doc, parse_body, read_json
from orchestrator.service import ResponsesService
from orchestrator.settings import OrchestratorSettings
from orchestrator.store import Store, open_store
from orchestrator.tools import cleanup_sessions
from orchestrator.worker.client import Chat, Generate, WorkerPool
from toolkit.tracing import TracingMiddleware

log = structlog.get_logger(__name__)
RESOURCES = (orchestrator.api.files, orchestrator.api.containers)
"""Included in this order: the routes match in it, the OpenAPI document lists them in it, and the files' and
containers' router lifespans (their prune jobs) start in it. Imported by full name: `create_app`'s `service` and
`chat` are other things."""
SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
SSE_OR_JSON = {"200": {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}
"""`stream=true` answers Server-Sent Events (each named, with a JSON `data` line) instead of JSON."""
CREATE_DOC = {**json_doc(ResponsesRequest), "responses": SSE_OR_JSON}
"""`create` reads its body itself (size limit, JSON errors), so the OpenAPI document names it here."""


def _sse(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def gen() -> AsyncIterator[str]:
        async for event in events:
            yield f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream")


def create_app(
    settings: OrchestratorSettings | None = None,
    *,
    generate: Generate | None = None,
    store: Store | None = None,
    pool: WorkerPool | None = None,
    chat: Chat | None = None,
) -> FastAPI:
    """The app; tests pass `generate` / `chat` (e.g. a pool over a scripted worker) and a store."""
    settings = settings or OrchestratorSettings()
    if generate is None:
        pool = pool or WorkerPool(
            settings.worker_urls,
            model=settings.model,
            api=settings.worker_api,
            apis=settings.worker_apis,
            health_interval_s=settings.health_interval_s,
            down_after=settings.worker_down_after,
            keepalive_expiry_s=settings.keepalive_expiry_s,
        )
        generate = pool.generate
    store = store if store is not None else open_store(settings)
    service = ResponsesService(
        settings,
        generate=generate,
        store=store,
        policy=McpPolicy.from_settings(settings),
        chat=chat or (pool.chat if pool is not None else None),
        api_for=pool.api_for if pool is not None else None,
        count_chat=pool.count_chat if pool is not None else None,
    )
    keys = ApiKeys(load_keys(settings))
    metrics = OrchestratorMetrics(pool, lambda: len(service.live))
    service.on_settled = metrics.settled

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.check()  # a Redis store that cannot be reached stops the start-up with a clear error
        warn_if_open(settings, keys)
        if pool is not None:
            await pool.start()
        try:
            async with service.running():
                yield
        finally:
            if pool is not None:
                await pool.aclose()
            await store.aclose()

    app = FastAPI(title="toolfleet orchestrator", lifespan=lifespan, responses=ERRORS)
    app.add_middleware(AuthMiddleware, keys=keys, rate=service.limits.rate, metrics_token=settings.metrics_token)
    app.add_middleware(BodyLimitMiddleware, limits=BodyLimits(settings.max_body_bytes, settings.max_file_bytes))
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(TracingMiddleware)  # outermost: every request is a span, auth refusals too
    app.state.service = service
    app.state.files = Files.from_settings(settings)
    app.state.containers = Containers.from_settings(app.state.files, settings)
    service.containers = app.state.containers
    sandboxes = {url for ns in ("python", "container") if (url := service.endpoints.url_for(ns)) is not None}
    app.state.containers.on_drop = lambda container_id: cleanup_sessions(container_id, sandboxes)  # they go with it

    async def _error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc, f"{request.method} {request.url.path}")

    # The known kinds are registered apart from `Exception`, whose handler Starlette runs as a 500 path.
    for kind in (RequestError, StoreUnavailable, ValidationError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, _error)
    deps = Deps(settings, service, pool, app.state.files, app.state.containers, metrics)
    for resource in RESOURCES:
        app.include_router(resource.router(deps))
    _responses_routes(app, service)
    relay = ChatRelay(
        pool,
        service.limits.running,
        max_output_tokens=settings.max_output_tokens,
        context_tokens=settings.context_tokens,
    )
    _chat_routes(app, relay)
    conversation_routes.add_routes(app, service.conversations)
    context_routes.add_routes(app, service)
    websocket_routes.add_routes(app, service, error_response)
    _service_routes(app, service, pool, metrics, settings.model)
    return app


def _responses_routes(app: FastAPI, service: ResponsesService) -> None:
    """`/v1/responses`: each route reads its parameters and hands them to the service."""

    @app.post("/v1/responses", openapi_extra=CREATE_DOC)
    async def create(request: Request) -> Response:
        req = await parse_body(await request.body())
        live = await service.create(req, request.state.owner, base_url=str(request.base_url))
        if req.stream:
            return _sse(service.stream(live))
        if req.background:
            return JSONResponse(live.builder.snapshot())
        body = await service.result(live, gone=lambda: _disconnected(request))
        return Response(status_code=499) if body is None else JSONResponse(body)  # 499: nobody reads it

    @app.get("/v1/responses/{rid}", openapi_extra={"responses": SSE_OR_JSON})
    async def get(request: Request, rid: str, stream: bool = False, starting_after: int = -1) -> Response:
        if stream:
            return _sse(await service.replay(rid, request.state.owner, starting_after))
        return JSONResponse(await service.retrieve(rid, request.state.owner))

    @app.delete("/v1/responses/{rid}")
    async def delete(request: Request, rid: str) -> Response:
        return JSONResponse(await service.delete(rid, request.state.owner))

    @app.post("/v1/responses/{rid}/cancel")
    async def cancel(request: Request, rid: str) -> Response:
        return JSONResponse(await service.cancel(rid, request.state.owner))

    @app.get("/v1/responses/{rid}/input_items")
    async def input_items(
        request: Request, rid: str, limit: int = 20, order: str = "desc", after: str | None = None
    ) -> Response:
        return JSONResponse(await service.input_items(rid, request.state.owner, limit, order, after))


def _chat_routes(app: FastAPI, relay: ChatRelay) -> None:
    """`/v1/chat/completions`, relayed to the workers (`chat_completions.py`)."""

    @app.post("/v1/chat/completions", openapi_extra={"responses": SSE_OR_JSON})
    async def chat_completions(request: Request) -> Response:
        return await relay.answer(await read_json(await request.body()), request.state.owner)


def _service_routes(
    app: FastAPI, service: ResponsesService, pool: WorkerPool | None, metrics: OrchestratorMetrics, model: str | None
) -> None:
    """Models, health and metrics."""

    async def model_names() -> list[str]:
        return await pool.models() if pool is not None else [model or "gpt-oss"]

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [_model(n) for n in await model_names()]})

    @app.get("/v1/models/{model_id:path}")
    async def model_by_id(model_id: str) -> Response:
        if model_id not in await model_names():
            raise RequestError(f"The model {model_id!r} does not exist", "model", 404, "model_not_found")
        return JSONResponse(_model(model_id))

    @app.get("/healthz")
    async def healthz(request: Request) -> Response:
        """Ok or not for anyone (a load balancer's probe); the load and the workers' addresses for an operator
        only (`AuthMiddleware.operator`: the metrics token, or loopback when none is set)."""
        healthy = pool is None or any(w.healthy for w in pool.workers)
        body: dict[str, Any] = {"status": "ok" if healthy else "degraded"}
        if request.state.operator:
            body["running"] = len(service.live)
        if request.state.operator and pool is not None:
            body["workers"] = [{"url": w.url, "healthy": w.healthy, "outstanding": w.outstanding} for w in pool.workers]
        return JSONResponse(body, 200 if healthy else 503)

    @app.get("/metrics", response_class=PlainTextResponse)  # the class documents Prometheus' text format
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "toolfleet"}


async def _disconnected(request: Request) -> None:
    """Returns once the client closes its connection (its body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
