"""The `/v1/vector_stores` routes (the SDK's `vector_stores`, `vector_stores.files` and `vector_stores.search`).

`file_batches`, a file's `content` and updating a file's attributes have no route yet: the SDK's calls of them get
404 (see `orchestrator/vector_stores.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.api.deps import Deps
from orchestrator.containers import json_body
from orchestrator.tools import Endpoints
from orchestrator.vector_stores import AddFile, CreateStore, Search, UpdateStore, VectorStores

Limit = Annotated[int, Query(ge=1, le=100)]
Order = Literal["asc", "desc"]
Status = Literal["in_progress", "completed", "failed", "cancelled"]


def router(deps: Deps) -> APIRouter:
    """The routes over one `VectorStores`, whose ingestion in flight the router's lifespan stops."""
    url = Endpoints(deps.settings.tools_url, deps.settings.endpoint_overrides()).url_for("file_search")
    stores = VectorStores(deps.files, url)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await stores.aclose()

    router = APIRouter(lifespan=lifespan)

    @router.post("/v1/vector_stores")
    async def create(request: Request) -> Response:
        owner = request.state.owner
        record = await stores.create(CreateStore.model_validate(await json_body(request)), owner)
        return JSONResponse(await stores.body(record))

    @router.get("/v1/vector_stores")
    async def listing(request: Request, limit: Limit = 20, order: Order = "desc", after: str | None = None) -> Response:
        return JSONResponse(await stores.listing(request.state.owner, limit=limit, order=order, after=after))

    @router.get("/v1/vector_stores/{store_id}")
    async def retrieve(request: Request, store_id: str) -> Response:
        return JSONResponse(await stores.body(await stores.find(store_id, request.state.owner)))

    @router.post("/v1/vector_stores/{store_id}")
    async def update(request: Request, store_id: str) -> Response:
        spec = UpdateStore.model_validate(await json_body(request))
        return JSONResponse(await stores.body(await stores.update(store_id, request.state.owner, spec)))

    @router.delete("/v1/vector_stores/{store_id}")
    async def delete(request: Request, store_id: str) -> Response:
        await stores.delete(store_id, request.state.owner)
        return JSONResponse({"id": store_id, "object": "vector_store.deleted", "deleted": True})

    @router.post("/v1/vector_stores/{store_id}/search")
    async def search(request: Request, store_id: str) -> Response:
        spec = Search.model_validate(await json_body(request))
        return JSONResponse(await stores.search(store_id, request.state.owner, spec))

    _file_routes(router, stores)
    return router


def _file_routes(router: APIRouter, stores: VectorStores) -> None:
    @router.post("/v1/vector_stores/{store_id}/files")
    async def add_file(request: Request, store_id: str) -> Response:
        spec = AddFile.model_validate(await json_body(request))
        return JSONResponse((await stores.add_file(store_id, request.state.owner, spec)).body())

    @router.get("/v1/vector_stores/{store_id}/files")
    async def files(
        request: Request,
        store_id: str,
        limit: Limit = 20,
        order: Order = "desc",
        after: str | None = None,
        filter: Status | None = None,
    ) -> Response:
        owner = request.state.owner
        listed = await stores.files_page(store_id, owner, limit=limit, order=order, after=after, status=filter)
        return JSONResponse(listed)

    @router.get("/v1/vector_stores/{store_id}/files/{file_id}")
    async def file(request: Request, store_id: str, file_id: str) -> Response:
        return JSONResponse((await stores.find_file(store_id, file_id, request.state.owner)).body())

    @router.delete("/v1/vector_stores/{store_id}/files/{file_id}")
    async def delete_file(request: Request, store_id: str, file_id: str) -> Response:
        await stores.delete_file(store_id, file_id, request.state.owner)
        return JSONResponse({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})
