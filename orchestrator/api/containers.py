"""The `/v1/containers` routes (the SDK's `containers` resource and `containers.files`), one router."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.api.deps import Deps
from orchestrator.api.files import pruning
from orchestrator.containers import AddFile, Containers

Limit = Annotated[int, Query(ge=1, le=100)]
Order = Literal["asc", "desc"]
CREATE_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object", "required": ["name"]}}},
    }
}
ADD_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": AddFile.model_json_schema()},
            "multipart/form-data": {
                "schema": {"type": "object", "required": ["file"], "properties": {"file": {"format": "binary"}}}
            },
        },
    }
}
"""The bodies are read by the handlers (size limit, JSON or a streamed upload), so the document names them."""


def router(deps: Deps) -> APIRouter:
    """The routes over `deps.containers`, which the router's lifespan prunes every prune interval."""
    containers = deps.containers
    router = APIRouter(lifespan=pruning(deps.settings.prune_interval_s, containers.prune, "containers.prune"))

    @router.post("/v1/containers", openapi_extra=CREATE_DOC)
    async def create(request: Request) -> Response:
        return JSONResponse((await containers.create(request, request.state.owner)).body())

    @router.get("/v1/containers")
    async def listing(
        request: Request, limit: Limit = 20, order: Order = "desc", after: str | None = None, name: str | None = None
    ) -> Response:
        owner = request.state.owner
        return JSONResponse(await containers.listing(owner, limit=limit, order=order, after=after, name=name))

    @router.get("/v1/containers/{container_id}")
    async def retrieve(request: Request, container_id: str) -> Response:
        return JSONResponse((await containers.find(container_id, request.state.owner)).body())

    @router.delete("/v1/containers/{container_id}")
    async def delete(request: Request, container_id: str) -> Response:
        await containers.delete(container_id, request.state.owner)
        return JSONResponse({"id": container_id, "object": "container.deleted", "deleted": True})

    router.include_router(_file_routes(containers))
    return router


def _file_routes(containers: Containers) -> APIRouter:
    """`/v1/containers/{id}/files`: a container's files, for the container's owner."""
    router = APIRouter()

    @router.post("/v1/containers/{container_id}/files", openapi_extra=ADD_DOC)
    async def add_file(request: Request, container_id: str) -> Response:
        return JSONResponse((await containers.add_file(container_id, request.state.owner, request)).body())

    @router.get("/v1/containers/{container_id}/files")
    async def files(
        request: Request, container_id: str, limit: Limit = 20, order: Order = "desc", after: str | None = None
    ) -> Response:
        owner = request.state.owner
        return JSONResponse(await containers.files_page(container_id, owner, limit=limit, order=order, after=after))

    @router.get("/v1/containers/{container_id}/files/{file_id}")
    async def file(request: Request, container_id: str, file_id: str) -> Response:
        return JSONResponse((await containers.find_file(container_id, file_id, request.state.owner)).body())

    @router.get("/v1/containers/{container_id}/files/{file_id}/content")
    async def content(request: Request, container_id: str, file_id: str) -> Response:
        record = await containers.find_file(container_id, file_id, request.state.owner)
        return await containers.files.download(file_id, record.path.rsplit("/", 1)[-1])

    @router.delete("/v1/containers/{container_id}/files/{file_id}")
    async def delete_file(request: Request, container_id: str, file_id: str) -> Response:
        await containers.delete_file(container_id, file_id, request.state.owner)
        return JSONResponse({"id": file_id, "object": "container.file.deleted", "deleted": True})

    return router
