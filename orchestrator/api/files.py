"""The `/v1/files` routes (the SDK's `files` resource): one router, included by the app with one line."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.api.deps import Deps
from orchestrator.responses.upkeep import every

UPLOAD_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": ["assistants", "user_data"]},
                        "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
                        "expires_after[seconds]": {"type": "integer"},
                    },
                }
            }
        },
    }
}
"""The upload reads its body as a stream itself, so the OpenAPI document names the form here."""


def pruning(
    interval_s: float, prune: Callable[[], Awaitable[None]], name: str
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """A router's lifespan: `prune` every `interval_s` while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pruner = asyncio.create_task(every(interval_s, prune, name))
        try:
            yield
        finally:
            pruner.cancel()

    return lifespan


def router(deps: Deps) -> APIRouter:
    """The routes over `deps.files`, which the router's lifespan prunes every prune interval."""
    files = deps.files
    router = APIRouter(lifespan=pruning(deps.settings.prune_interval_s, files.prune, "files.prune"))

    @router.post("/v1/files", openapi_extra=UPLOAD_DOC)
    async def upload(request: Request) -> Response:
        return JSONResponse((await files.upload(request, request.state.owner)).body())

    @router.get("/v1/files")
    async def listing(
        request: Request,
        purpose: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
        order: Literal["asc", "desc"] = "desc",
        after: str | None = None,
    ) -> Response:
        owner = request.state.owner
        return JSONResponse(await files.page(owner, purpose=purpose, limit=limit, order=order, after=after))

    @router.get("/v1/files/{file_id}")
    async def retrieve(request: Request, file_id: str) -> Response:
        return JSONResponse((await files.find(file_id, request.state.owner)).body())

    @router.get("/v1/files/{file_id}/content")
    async def content(request: Request, file_id: str) -> Response:
        return await files.download(file_id, (await files.find(file_id, request.state.owner)).filename)

    @router.delete("/v1/files/{file_id}")
    async def delete(request: Request, file_id: str) -> Response:
        await files.delete(file_id, request.state.owner)
        return JSONResponse({"id": file_id, "object": "file", "deleted": True})

    return router
