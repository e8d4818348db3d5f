"""The `/v1/vector_stores` routes (the SDK's `vector_stores`, `vector_stores.files`, `vector_stores.file_batches`
and `vector_stores.search`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.api.deps import Deps
from orchestrator.containers import json_body
from orchestrator.responses.upkeep import every
from orchestrator.tools import Endpoints
from orchestrator.vector_stores import (
    AddFile,
    CreateBatch,
    CreateStore,
    FileBatches,
    Limits,
    Search,
    UpdateFile,
    UpdateStore,
    VectorStores,
)

Limit = Annotated[int, Query(ge=1, le=100)]
Order = Literal["asc", "desc"]
Status = Literal["in_progress", "completed", "failed", "cancelled"]


def router(deps: Deps) -> APIRouter:
    """The routes over one `VectorStores`, whose lifespan reaps expired stores every prune interval and stops the
    ingestion in flight at the end."""
    settings = deps.settings
    url = Endpoints(settings.tools_url, settings.endpoint_overrides()).url_for("file_search")
    limits = Limits(
        settings.vector_store_concurrency,
        settings.max_vector_store_file_bytes,
        settings.max_vector_store_bytes_per_key,
        settings.max_vector_stores_per_key,
    )
    stores = VectorStores(deps.files, url, limits)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(every(settings.prune_interval_s, stores.prune, "vector_stores.prune"))
        try:
            yield
        finally:
            reaper.cancel()
            await stores.aclose()

    router = APIRouter(lifespan=lifespan)
    _store_routes(router, stores)
    _file_routes(router, stores)
    _batch_routes(router, FileBatches(stores))
    return router


def _store_routes(router: APIRouter, stores: VectorStores) -> None:
    @router.post("/v1/vector_stores")
    async def create(request: Request) -> Response:
        owner = request.state.owner
        record = await stores.create(CreateStore.model_validate(await json_body(request)), owner)
        return JSONResponse(await stores.body(record))

    @router.get("/v1/vector_stores")
    async def listing(
        request: Request, limit: Limit = 20, order: Order = "desc", after: str | None = None, before: str | None = None
    ) -> Response:
        owner = request.state.owner
        return JSONResponse(await stores.listing(owner, limit=limit, order=order, after=after, before=before))

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
        before: str | None = None,
        filter: Status | None = None,
    ) -> Response:
        cursor = {"limit": limit, "order": order, "after": after, "before": before}
        return JSONResponse(await stores.files_page(store_id, request.state.owner, status=filter, **cursor))

    @router.get("/v1/vector_stores/{store_id}/files/{file_id}")
    async def file(request: Request, store_id: str, file_id: str) -> Response:
        return JSONResponse((await stores.find_file(store_id, file_id, request.state.owner)).body())

    @router.post("/v1/vector_stores/{store_id}/files/{file_id}")
    async def update_file(request: Request, store_id: str, file_id: str) -> Response:
        spec = UpdateFile.model_validate(await json_body(request))
        return JSONResponse((await stores.update_file(store_id, file_id, request.state.owner, spec)).body())

    @router.get("/v1/vector_stores/{store_id}/files/{file_id}/content")
    async def content(request: Request, store_id: str, file_id: str) -> Response:
        return JSONResponse(await stores.content(store_id, file_id, request.state.owner))

    @router.delete("/v1/vector_stores/{store_id}/files/{file_id}")
    async def delete_file(request: Request, store_id: str, file_id: str) -> Response:
        await stores.delete_file(store_id, file_id, request.state.owner)
        return JSONResponse({"id": file_id, "object": "vector_store.file.deleted", "deleted": True})


def _batch_routes(router: APIRouter, batches: FileBatches) -> None:
    @router.post("/v1/vector_stores/{store_id}/file_batches")
    async def create_batch(request: Request, store_id: str) -> Response:
        spec = CreateBatch.model_validate(await json_body(request))
        return JSONResponse(await batches.create(store_id, request.state.owner, spec))

    @router.get("/v1/vector_stores/{store_id}/file_batches/{batch_id}")
    async def batch(request: Request, store_id: str, batch_id: str) -> Response:
        return JSONResponse(await batches.body(await batches.find(store_id, batch_id, request.state.owner)))

    @router.post("/v1/vector_stores/{store_id}/file_batches/{batch_id}/cancel")
    async def cancel(request: Request, store_id: str, batch_id: str) -> Response:
        return JSONResponse(await batches.cancel(store_id, batch_id, request.state.owner))

    @router.get("/v1/vector_stores/{store_id}/file_batches/{batch_id}/files")
    async def batch_files(
        request: Request,
        store_id: str,
        batch_id: str,
        limit: Limit = 20,
        order: Order = "desc",
        after: str | None = None,
        before: str | None = None,
        filter: Status | None = None,
    ) -> Response:
        owner = request.state.owner
        await batches.find(store_id, batch_id, owner)
        cursor = {"limit": limit, "order": order, "after": after, "before": before}
        return JSONResponse(
            await batches.stores.files_page(store_id, owner, status=filter, batch_id=batch_id, **cursor)
        )
