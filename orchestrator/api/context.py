"""Routes about a response's context before it runs: `POST /v1/responses/input_tokens` counts its prompt,
`POST /v1/responses/compact` has the model summarise it into a compacted window."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from orchestrator.api.deps import Deps
from orchestrator.errors import RequestError
from orchestrator.request.schema import ResponsesRequest, read_json
from orchestrator.responses.service import ResponsesService
from orchestrator.worker.client import WorkerError, WorkerUnavailable

T = TypeVar("T")
COUNTED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "previous_response_id",
        "conversation",
        "reasoning",
        "parallel_tool_calls",
        "truncation",
    }
)
"""The SDK's count parameters this server renders (`truncation: auto` drops what a response would drop); the
others (`text`, `personality`) are a 400."""
COMPACTED = frozenset({"model", "input", "instructions", "previous_response_id", "prompt_cache_key"})
"""The SDK's compact parameters (`prompt_cache_key` an affinity key, as on a response); the others are a 400."""
OBJECT_DOC = {"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}}
"""The bodies are read by the handlers (`read_json`: depth, surrogates), so the document names them."""


def _checked(body: Any, allowed: frozenset[str], route: str) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if unknown := sorted(set(body) - allowed):
        raise RequestError(f"parameter {unknown[0]!r} is not supported by {route} here", unknown[0])
    return ResponsesRequest.model_validate(body)


async def _on_worker(call: Awaitable[T], service: ResponsesService) -> T:
    """Worker failures as OpenAI-shaped server errors (503: none could serve; 502: one failed), the worker
    named by its role."""
    try:
        return await call
    except (WorkerUnavailable, WorkerError) as exc:
        message = service.worker_failure(exc)
        error = RequestError(message, None, 503 if isinstance(exc, WorkerUnavailable) else 502)
        error.etype = "server_error"
        raise error from exc


def router(deps: Deps) -> APIRouter:
    """`/v1/responses/input_tokens` and `/v1/responses/compact`."""
    service = deps.service
    router = APIRouter()

    @router.post("/v1/responses/input_tokens", openapi_extra=OBJECT_DOC)
    async def input_tokens(request: Request) -> JSONResponse:
        req = _checked(await read_json(await request.body()), COUNTED, "input_tokens")
        count = await _on_worker(service.count_input_tokens(req, request.state.owner), service)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count})

    @router.post("/v1/responses/compact", openapi_extra=OBJECT_DOC)
    async def compact(request: Request) -> JSONResponse:
        req = _checked(await read_json(await request.body()), COMPACTED, "compact")
        if not req.model:  # required by the SDK's compact parameters and the open Responses spec
            raise RequestError("parameter 'model' is required by compact", "model")
        return JSONResponse(await _on_worker(service.compact(req, request.state.owner), service))

    return router
