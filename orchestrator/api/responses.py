"""`/v1/responses` over HTTP: each route reads its parameters and hands them to the service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from orchestrator.api.containers import Limit, Order
from orchestrator.api.deps import Deps
from orchestrator.request.schema import ResponsesRequest, json_doc, parse_body

SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
}
SSE_OR_JSON = {"200": {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}
"""`stream=true` answers Server-Sent Events (each named, with a JSON `data` line) instead of JSON."""
CREATE_DOC = {**json_doc(ResponsesRequest), "responses": SSE_OR_JSON}
"""`create` reads its body itself (size limit, JSON errors), so the OpenAPI document names it here."""
StartingAfter = Annotated[int, Query(ge=-1, le=2**53 - 1, description="the sequence number to resume after")]
"""-1 (the default) replays from the first event; a lower one used to index the log from its end (an IndexError
mid-stream), and one past 64 bits cannot be asked of the shared store."""


def _sse(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def gen() -> AsyncIterator[str]:
        async for event in events:
            yield f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"

    return StreamingResponse(gen(), media_type="text/event-stream")


def router(deps: Deps) -> APIRouter:
    """`/v1/responses`: create, retrieve (or replay), delete, cancel, input items."""
    service, responses = deps.service, deps.service.responses
    router = APIRouter()

    @router.post("/v1/responses", openapi_extra=CREATE_DOC)
    async def create(request: Request) -> Response:
        req = await parse_body(await request.body())
        live = await service.create(req, request.state.owner, base_url=str(request.base_url))
        if req.stream:
            return _sse(responses.stream(live))
        if req.background:
            return JSONResponse(live.builder.snapshot())
        body = await responses.result(live, gone=lambda: _disconnected(request))
        return Response(status_code=499) if body is None else JSONResponse(body)  # 499: nobody reads it

    @router.get("/v1/responses/{rid}", openapi_extra={"responses": SSE_OR_JSON})
    async def get(request: Request, rid: str, stream: bool = False, starting_after: StartingAfter = -1) -> Response:
        if stream:
            return _sse(await responses.replay(rid, request.state.owner, starting_after))
        return JSONResponse(await responses.retrieve(rid, request.state.owner))

    @router.delete("/v1/responses/{rid}")
    async def delete(request: Request, rid: str) -> Response:
        return JSONResponse(await responses.delete(rid, request.state.owner))

    @router.post("/v1/responses/{rid}/cancel")
    async def cancel(request: Request, rid: str) -> Response:
        return JSONResponse(await responses.cancel(rid, request.state.owner))

    @router.get("/v1/responses/{rid}/input_items")
    async def input_items(
        request: Request, rid: str, limit: Limit = 20, order: Order = "desc", after: str | None = None
    ) -> Response:
        return JSONResponse(await responses.input_items(rid, request.state.owner, limit, order, after))

    return router


async def _disconnected(request: Request) -> None:
    """Returns once the client closes its connection (its body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
