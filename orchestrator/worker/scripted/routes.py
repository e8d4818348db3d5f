"""What both SCRIPTED wire adapters answer alike: the app with its models / health / debug routes, the
error bodies (a bad request, a scripted HTTP failure), and a streamed answer counted as vLLM counts it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.worker.scripted.rules import Scenario, Stats

log = structlog.get_logger(__name__)
MAX_MODEL_LEN = 131072


class StandIn(Protocol):
    scenario: Scenario
    stats: Stats


class DroppedConnection(Exception):
    """Raised inside a streaming body to make the server close the connection mid-stream (a dying worker)."""


class ScriptedEnd(Exception):
    """Raised inside a streaming body after vLLM's in-stream error chunk: the stream ended as scripted."""


def build(model: StandIn, routes: list[Route]) -> Starlette:
    """The adapter's routes plus the shared `/v1/models` (labelled scripted), `/health`, `/healthz`, `/debug/stats`,
    `/metrics` (the prefix-cache counters)."""

    async def models(request: Request) -> Response:
        name = model.scenario.model
        card = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "toolfleet-scripted",
            "root": name,
            "parent": None,
            "max_model_len": MAX_MODEL_LEN,
            "scripted": True,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def debug_stats(request: Request) -> Response:
        return JSONResponse(dataclasses.asdict(model.stats))

    async def metrics(request: Request) -> Response:
        """vLLM's two prefix-cache counters, in its names: what the orchestrator scrapes per worker."""
        stats, labels = model.stats, f'{{engine="0",model_name="{model.scenario.model}"}}'
        lines = [
            "# TYPE vllm:prefix_cache_queries counter",
            f"vllm:prefix_cache_queries_total{labels} {stats.prefix_cache_queries}",
            "# TYPE vllm:prefix_cache_hits counter",
            f"vllm:prefix_cache_hits_total{labels} {stats.prefix_cache_hits}",
        ]
        return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            *routes,
            Route("/v1/models", models),
            Route("/health", health),  # what vLLM answers
            Route("/healthz", health),  # what every toolfleet service answers (tests/support/service.py waits on it)
            Route("/debug/stats", debug_stats),
            Route("/metrics", metrics),
        ]
    )


def bad_request(exc: Exception) -> JSONResponse:
    return JSONResponse({"error": {"message": f"bad request: {exc}", "type": "BadRequestError"}}, 400)


def scripted_status(stats: Stats, status: int) -> JSONResponse:
    """A rule's `status`: that HTTP error at once, as a failing vLLM answers it."""
    stats.failed += 1
    message = f"scripted failure (HTTP {status})"
    return JSONResponse(
        {"error": {"message": message, "type": "InternalServerError", "param": None, "code": status}}, status
    )


def counted(stats: Stats, body: AsyncIterator[str], request_id: str) -> StreamingResponse:
    """A streamed answer, counted in `stats`: in flight while it runs, then completed, failed (a scripted
    failure) or aborted (the client went away before the end; vLLM aborts those)."""

    async def stream() -> AsyncIterator[str]:
        outcome = "aborted"  # unless the stream gets to its end (or to its scripted failure)
        stats.in_flight += 1
        try:
            async for chunk in body:
                yield chunk
            outcome = "completed"
        except ScriptedEnd:
            outcome = "failed"
        except DroppedConnection:
            outcome = "failed"
            raise
        finally:
            stats.in_flight -= 1
            setattr(stats, outcome, getattr(stats, outcome) + 1)
            if outcome == "aborted":
                log.info("scripted.aborted", request_id=request_id)  # as vLLM logs "Aborted request ..."

    return StreamingResponse(stream(), media_type="text/event-stream")


def sse(obj: dict[str, Any] | str) -> str:
    """One server-sent event's `data:` line."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return f"data: {data}\n\n"
