"""The service's own routes: models, health and metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from orchestrator.api.deps import Deps
from orchestrator.errors import RequestError


def router(deps: Deps) -> APIRouter:
    """Models, health and metrics."""
    service, pool, metrics, model = deps.service, deps.pool, deps.metrics, deps.settings.model
    router = APIRouter()

    async def model_names() -> list[str]:
        return await pool.models() if pool is not None else [model or "gpt-oss"]

    @router.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [_model(n) for n in await model_names()]})

    @router.get("/v1/models/{model_id:path}")
    async def model_by_id(model_id: str) -> Response:
        if model_id not in await model_names():
            raise RequestError(f"The model {model_id!r} does not exist", "model", 404, "model_not_found")
        return JSONResponse(_model(model_id))

    @router.get("/healthz")
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

    @router.get("/metrics", response_class=PlainTextResponse)  # the class documents Prometheus' text format
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    return router


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "toolfleet"}
