"""The routes of the openai SDK's `conversations` resource; every one is owner-checked by `Conversations`."""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from orchestrator.api.deps import Deps
from orchestrator.conversations import ConversationCreate, ConversationUpdate, ItemsCreate
from orchestrator.request.schema import json_doc, read_json

M = TypeVar("M", bound=BaseModel)


def _include(request: Request) -> list[str]:
    """`include` as the openai SDK sends it (`include[]=a&include[]=b`), or repeated plain."""
    return request.query_params.getlist("include[]") + request.query_params.getlist("include")


async def _body(request: Request, model: type[M], *, required: bool = True) -> M:
    """The body as `model`, read by `read_json` (depth, surrogates: a 400 naming the field); an empty optional
    body is the model's defaults."""
    raw = await request.body()
    return model.model_validate(await read_json(raw) if raw or required else {})


def router(deps: Deps) -> APIRouter:
    """`/v1/conversations...`; bodies are validated strictly (unknown fields: 400)."""
    conversations = deps.service.conversations
    router = APIRouter()

    @router.post("/v1/conversations", openapi_extra=json_doc(ConversationCreate, required=False))
    async def create(request: Request) -> JSONResponse:
        body = await _body(request, ConversationCreate, required=False)
        return JSONResponse(await conversations.create(request.state.owner, body))

    @router.get("/v1/conversations/{conv_id}")
    async def retrieve(request: Request, conv_id: str) -> JSONResponse:
        return JSONResponse((await conversations.find(conv_id, request.state.owner)).body())

    @router.post("/v1/conversations/{conv_id}", openapi_extra=json_doc(ConversationUpdate))
    async def update(request: Request, conv_id: str) -> JSONResponse:
        body = await _body(request, ConversationUpdate)
        return JSONResponse(await conversations.update(conv_id, request.state.owner, body))

    @router.delete("/v1/conversations/{conv_id}")
    async def delete(request: Request, conv_id: str) -> JSONResponse:
        return JSONResponse(await conversations.delete(conv_id, request.state.owner))

    @router.post("/v1/conversations/{conv_id}/items", openapi_extra=json_doc(ItemsCreate))
    async def add_items(request: Request, conv_id: str) -> JSONResponse:
        body = await _body(request, ItemsCreate)
        return JSONResponse(await conversations.add(conv_id, request.state.owner, body, _include(request)))

    @router.get("/v1/conversations/{conv_id}/items")
    async def list_items(
        request: Request, conv_id: str, limit: int = 20, order: str = "desc", after: str | None = None
    ) -> JSONResponse:
        page = await conversations.list(
            conv_id, request.state.owner, limit=limit, order=order, after=after, include=_include(request)
        )
        return JSONResponse(page)

    @router.get("/v1/conversations/{conv_id}/items/{item_id}")
    async def retrieve_item(request: Request, conv_id: str, item_id: str) -> JSONResponse:
        return JSONResponse(await conversations.item(conv_id, request.state.owner, item_id, _include(request)))

    @router.delete("/v1/conversations/{conv_id}/items/{item_id}")
    async def delete_item(request: Request, conv_id: str, item_id: str) -> JSONResponse:
        return JSONResponse(await conversations.remove_item(conv_id, request.state.owner, item_id))

    return router
