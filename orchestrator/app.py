"""HTTP routes of the orchestrator; every error becomes an OpenAI-shaped error body in one place."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from orchestrator.auth import ApiKeys, AuthMiddleware, load_keys, warn_if_open
from orchestrator.chat_completions import ChatRelay
from orchestrator.limits import RequestRate
from orchestrator.mcp_policy import McpPolicy
from orchestrator.metrics import LatencyMiddleware, OrchestratorMetrics
from orchestrator.params import check_params
from orchestrator.schema import ErrorBody, RequestError, ResponsesRequest, error_body
from orchestrator.service import RUNNING, ResponsesService
from orchestrator.settings import OrchestratorSettings
from orchestrator.store import Store, StoreUnavailable, open_store
from orchestrator.worker.client import Chat, Generate, WorkerPool
from toolkit.tracing import TracingMiddleware

log = structlog.get_logger(__name__)
MAX_BODY = 16 * 1024 * 1024
REPLAY_POLL_S = 0.25  # a stream of a response running on another replica follows the shared store
ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "The request was refused (OpenAI's error shape)"},
    "5XX": {"model": ErrorBody, "description": "The service failed (OpenAI's error shape)"},
}
"""Declared on every route; also keeps FastAPI from declaring its own `{"detail"}` 422 body."""
PARAM_SOURCES = frozenset({"body", "query", "path", "header", "cookie"})


def _inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema with its `$defs` inlined, so it can stand inside an OpenAPI operation."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node

    return resolve(schema)


SSE_EVENT = {"type": "object", "required": ["event", "data"],
             "properties": {"event": {"type": "string"}, "data": {"type": "string"}}}  # fmt: skip
SSE_OR_JSON = {"200": {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}
"""`stream=true` answers Server-Sent Events (each named, with a JSON `data` line) instead of JSON."""
CREATE_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_defs(ResponsesRequest.model_json_schema())}},
    },
    "responses": SSE_OR_JSON,
}
"""`create` reads its body itself (size limit, JSON errors), so the OpenAPI document names it here."""


def error_response(exc: BaseException) -> JSONResponse:
    """The single exception-to-wire boundary."""
    headers: dict[str, str] = {}
    match exc:
        case RequestError():
            status, etype, msg, param, code = exc.status, exc.etype, str(exc), exc.param, exc.code
            headers = exc.headers
        case StoreUnavailable():
            log.warning("store.unavailable", error=str(exc))
            status, etype, msg, param, code = 503, "server_error", str(exc), None, "store_unavailable"
        case ValidationError() | RequestValidationError():
            first = exc.errors()[0]
            loc = list(first["loc"])
            if isinstance(exc, RequestValidationError) and loc and loc[0] in PARAM_SOURCES:
                loc = loc[1:]  # FastAPI names where the parameter was: OpenAI's `param` is the name alone
            param = ".".join(str(p) for p in loc) or None
            status, etype, msg, code = 400, "invalid_request_error", f"{param}: {first['msg']}", None
        case HTTPException():  # routing: no such path (404) or method (405)
            status, etype, msg, param, code = exc.status_code, "invalid_request_error", str(exc.detail), None, None
            headers = dict(exc.headers or {})
        case _:
            log.error("request.crashed", error=repr(exc))
            status, etype, msg, param, code = 500, "server_error", "internal error", None, None
    return JSONResponse(error_body(msg, etype, param, code), status, headers=headers)


def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    async def gen() -> AsyncIterator[str]:
        async for event in events:
            yield f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"

    return gen()


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
        pool = pool or WorkerPool(settings.worker_urls, model=settings.model, api=settings.worker_api,
                                  apis=settings.worker_apis, health_interval_s=settings.health_interval_s)  # fmt: skip
        generate = pool.generate
    chat = chat or (pool.chat if pool is not None else None)
    store = store if store is not None else open_store(settings)
    service = ResponsesService(settings, generate=generate, store=store, policy=McpPolicy.from_settings(settings),
                               chat=chat, api_for=pool.api_for if pool is not None else None)  # fmt: skip
    relay = ChatRelay(pool, settings.max_concurrent_per_key)
    keys = ApiKeys(load_keys(settings))
    metrics = OrchestratorMetrics(pool, lambda: len(service.live))
    service.on_settled = metrics.settled

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.check()  # a Redis store that cannot be reached stops the start-up with a clear error
        warn_if_open(settings, keys)
        if pool is not None:
            await pool.start()
        reaper = asyncio.create_task(_every(settings.reap_interval_s, service.reap_idle, "reaper"))
        watcher = asyncio.create_task(_every(settings.cancel_poll_s, service.watch_cancels, "cancel_watch"))
        try:
            yield
        finally:
            reaper.cancel()
            watcher.cancel()
            await service.aclose()
            if pool is not None:
                await pool.aclose()
            await store.aclose()

    app = FastAPI(title="toolfleet orchestrator", lifespan=lifespan, responses=ERRORS)
    rate = RequestRate(settings.rate_limit_rps, settings.rate_limit_burst)
    app.add_middleware(AuthMiddleware, keys=keys, rate=rate, metrics_token=settings.metrics_token)
    app.add_middleware(LatencyMiddleware, metrics=metrics)
    app.add_middleware(TracingMiddleware)  # outermost: every request is a span, auth refusals too
    app.state.service = service

    async def _error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    # The known kinds are registered apart from `Exception`, whose handler Starlette runs as a 500 path.
    for kind in (RequestError, StoreUnavailable, ValidationError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, _error)

    @app.post("/v1/responses", openapi_extra=CREATE_DOC)
    async def create(request: Request) -> Response:
        data = await _json_body(request)
        if not isinstance(data, dict):
            raise RequestError("the request body must be a JSON object")
        check_params(data)
        req = ResponsesRequest.model_validate(data)
        live = await service.create(req, request.state.owner)
        b = live.builder
        if req.stream:
            return StreamingResponse(_stream(live, req.background), media_type="text/event-stream")
        if req.background:
            return JSONResponse(b.snapshot())
        if not await _done_unless_disconnected(request, live.done):
            log.info("response.client_gone", response_id=b.id)
            if live.task and not live.task.done():
                live.task.cancel()  # the client went away: abort the generation
            await live.done.wait()
            return Response(status_code=499)  # nobody reads it
        if live.http_status != 200:  # partial output, if any, stays readable with GET when stored
            message = (b.body.get("error") or {}).get("message") or "the response failed"
            if req.store:
                message += f" (response {b.id} is stored with status {b.body['status']})"
            return JSONResponse({"error": {"message": message, "type": "server_error", "param": None,
                                           "code": live.error_code}}, live.http_status)  # fmt: skip
        return JSONResponse(b.body)

    @app.post("/v1/chat/completions", openapi_extra={"responses": SSE_OR_JSON})
    async def chat_completions(request: Request) -> Response:
        owner = request.state.owner
        running = sum(lv.owner == owner for lv in service.live.values())
        body = relay.admit(await _json_body(request), owner, running)
        if body.get("stream"):
            return StreamingResponse(relay.stream(body, owner), media_type="text/event-stream")
        return JSONResponse(await relay.complete(body, owner))

    async def _stream(live: Any, background: bool) -> AsyncIterator[str]:
        try:
            async for chunk in _sse(live.builder.follow()):
                yield chunk
        finally:
            if not background and live.task and not live.task.done() and not live.builder.finished:
                live.task.cancel()  # the client went away: abort the generation (not the settling after it)

    @app.get("/v1/responses/{rid}", openapi_extra={"responses": SSE_OR_JSON})
    async def get(request: Request, rid: str, stream: bool = False, starting_after: int = -1) -> Response:
        live, record = await service.find(rid, request.state.owner)
        if stream:
            if live is not None:
                return StreamingResponse(_sse(live.builder.follow(starting_after)), media_type="text/event-stream")

            async def replay() -> AsyncIterator[dict[str, Any]]:
                """Stored events; for a response running on another replica, until it is stored finished."""
                current, position = record, starting_after + 1
                while True:
                    for event in current.events[position:]:
                        yield event
                    position = max(position, len(current.events))
                    if current.body.get("status") not in RUNNING:
                        return
                    await asyncio.sleep(REPLAY_POLL_S)
                    if (current := await store.get(rid)) is None:
                        return  # deleted meanwhile

            return StreamingResponse(_sse(replay()), media_type="text/event-stream")
        return JSONResponse(live.builder.snapshot() if live else record.body)

    @app.delete("/v1/responses/{rid}")
    async def delete(request: Request, rid: str) -> Response:
        live, _ = await service.find(rid, request.state.owner)  # another key's id: 404 like a missing one
        if live is not None and live.task:
            live.task.cancel()
            await live.done.wait()
        if not await store.delete(rid):
            raise RequestError(f"response {rid!r} not found", "response_id", 404, "not_found")
        return JSONResponse({"id": rid, "object": "response.deleted", "deleted": True})

    @app.post("/v1/responses/{rid}/cancel")
    async def cancel(request: Request, rid: str) -> Response:
        return JSONResponse(await service.cancel(rid, request.state.owner))

    @app.get("/v1/responses/{rid}/input_items")
    async def input_items(
        request: Request, rid: str, limit: int = 20, order: str = "desc", after: str | None = None
    ) -> Response:
        _, record = await service.find(rid, request.state.owner)
        if record is None:
            raise RequestError(f"response {rid!r} is still running; its input items are listed once it ends",
                               None, 409)  # fmt: skip
        items = list(record.input_items)
        if order == "desc":
            items.reverse()
        if after:
            ids = [i.get("id") for i in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        limit = max(1, min(limit, 100))
        page = items[:limit]
        return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})  # fmt: skip

    async def model_names() -> list[str]:
        return await pool.models() if pool is not None else [settings.model or "gpt-oss"]

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [_model(n) for n in await model_names()]})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> Response:
        if model_id not in await model_names():
            raise RequestError(f"The model {model_id!r} does not exist", "model", 404, "model_not_found")
        return JSONResponse(_model(model_id))

    @app.get("/healthz")
    async def healthz() -> Response:
        healthy = pool is None or any(w.healthy for w in pool.workers)
        body = {"status": "ok" if healthy else "degraded", "running": len(service.live)}
        if pool is not None:
            body["workers"] = [{"url": w.url, "healthy": w.healthy, "outstanding": w.outstanding} for w in pool.workers]
        return JSONResponse(body, 200 if healthy else 503)

    @app.get("/metrics", response_class=PlainTextResponse)  # the class documents Prometheus' text format
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    return app


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise RequestError(f"request body larger than {MAX_BODY} bytes", None, 413)
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "toolfleet"}


async def _done_unless_disconnected(request: Request, done: asyncio.Event) -> bool:
    """Wait for `done`; False as soon as the client closes its connection (its body was read already)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    waiters = [asyncio.create_task(done.wait()), asyncio.create_task(disconnected())]
    try:
        finished, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
    return waiters[0] in finished


async def _every(interval_s: float, job: Callable[[], Awaitable[None]], name: str) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await job()
        except Exception:
            log.exception(f"{name}.failed")
