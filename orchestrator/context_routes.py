"""Routes about a response's context before it runs: `POST /v1/responses/input_tokens` counts its prompt."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.schema import RequestError, ResponsesRequest
from orchestrator.service import ResponsesService
from orchestrator.worker.client import WorkerError, WorkerUnavailable

COUNTED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "previous_response_id", "conversation",
                     "reasoning", "parallel_tool_calls"})  # fmt: skip
"""The SDK's count parameters this server renders; the others (`text`, `truncation`, `personality`) are a 400."""


def add_routes(app: FastAPI, service: ResponsesService) -> None:
    """Wire the context routes into `app`."""

    @app.post("/v1/responses/input_tokens")
    async def input_tokens(request: Request, body: dict[str, Any]) -> JSONResponse:
        if unknown := sorted(set(body) - COUNTED):
            raise RequestError(f"parameter {unknown[0]!r} is not supported by input_tokens here", unknown[0])
        req = ResponsesRequest.model_validate(body)
        try:
            count = await service.count_input_tokens(req, request.state.owner)
        except (WorkerUnavailable, WorkerError) as exc:  # the chat path asks a worker's tokenizer
            error = RequestError(str(exc), None, 503 if isinstance(exc, WorkerUnavailable) else 502)
            error.etype = "server_error"
            raise error from exc
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count})
