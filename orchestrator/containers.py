"""Containers (`/v1/containers`) and their files: records in the object store, bytes on the files volume.

A container's files are the platform's copy (as OpenAI's are): they outlive any one sandbox, are listed
and served from here, and expire with their container, `expires_after.minutes` after it was last used.
Adding a file by `file_id` links the uploaded file's bytes (no copy on the same volume). Another key's
container, or a file of a container that is not the caller's, answers the same 404 as a missing one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from orchestrator.errors import RequestError
from orchestrator.files import Files, page, receive_upload
from orchestrator.request.schema import read_json
from toolkit.sandbox.files import ROOT

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

log = structlog.get_logger(__name__)

MEMORY_LIMITS = ("1g", "4g", "16g", "64g")
DATA_DIR = ROOT  # where a container's files are in every sandbox (`toolkit/sandbox/files.py`)


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    anchor: Literal["last_active_at"]
    minutes: int = Field(ge=1, le=1440)


class NetworkPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["disabled"]  # sandboxes have no network; an allowlist cannot be honoured


class CreateContainer(BaseModel):
    """`containers.create`; `skills` and an allowlist network policy are refused by the types."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=256)
    file_ids: list[str] = Field(default_factory=list, max_length=100)
    memory_limit: Literal["1g", "4g", "16g", "64g"] = "1g"
    expires_after: ExpiresAfter = ExpiresAfter(anchor="last_active_at", minutes=20)
    network_policy: NetworkPolicy = NetworkPolicy(type="disabled")


class AddFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    file_id: str


@dataclass
class ContainerRecord:
    id: str
    owner: str
    name: str
    created_at: int
    last_active_at: int
    minutes: int
    memory_limit: str
    expires_at: int

    def body(self) -> dict[str, Any]:
        """`openai.types.ContainerCreateResponse` (and retrieve / list entries)."""
        return {
            "id": self.id,
            "object": "container",
            "name": self.name,
            "created_at": self.created_at,
            "status": "running",
            "last_active_at": self.last_active_at,
            "expires_after": {"anchor": "last_active_at", "minutes": self.minutes},
            "memory_limit": self.memory_limit,
            "network_policy": {"type": "disabled"},
        }


@dataclass
class ContainerFile:
    id: str
    owner: str  # the container's id: a container lists its files as an owner lists its objects
    path: str
    bytes: int
    created_at: int
    source: str
    expires_at: int

    def body(self) -> dict[str, Any]:
        """`openai.types.containers.FileCreateResponse` (and retrieve / list entries)."""
        return {
            "id": self.id,
            "object": "container.file",
            "bytes": self.bytes,
            "container_id": self.owner,
            "created_at": self.created_at,
            "path": self.path,
            "source": self.source,
        }


async def json_body(request: Request) -> Any:
    return await read_json(await request.body())


class Containers:
    """Every key's containers and their files, on the store and volume of `files`."""

    def __init__(
        self,
        files: Files,
        *,
        max_memory: str,
        retention_s: float,
        on_drop: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.files, self.objects = files, files.objects
        self.max_memory, self.retention_s = max_memory, retention_s
        # frees the tool sessions a container's id names (its sandboxes): they go with it
        self.on_drop = on_drop

    @classmethod
    def from_settings(
        cls, files: Files, settings: OrchestratorSettings, on_drop: Callable[[str], Awaitable[None]] | None = None
    ) -> Containers:
        return cls(
            files, max_memory=settings.max_container_memory, retention_s=settings.file_retention_s, on_drop=on_drop
        )

    async def create(self, request: Request, owner: str) -> ContainerRecord:
        """`POST /v1/containers`."""
        return await self.create_from(CreateContainer.model_validate(await json_body(request)), owner)

    async def create_from(self, spec: CreateContainer, owner: str) -> ContainerRecord:
        """A new container holding copies of `file_ids` (each the caller's) under /mnt/data."""
        if MEMORY_LIMITS.index(spec.memory_limit) > MEMORY_LIMITS.index(self.max_memory):
            message = f"memory_limit {spec.memory_limit!r} is above this server's maximum of {self.max_memory!r}"
            raise RequestError(message, "memory_limit")
        sources = [await self.files.find(fid, owner) for fid in spec.file_ids]
        names = [s.filename for s in sources]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise RequestError(f"file_ids name the same file name more than once: {', '.join(dupes)}", "file_ids")
        now = int(time.time())
        minutes = spec.expires_after.minutes
        record = ContainerRecord(
            "cntr_" + secrets.token_hex(16), owner, spec.name, now, now, minutes, spec.memory_limit, now + 60 * minutes
        )
        await self.objects.put("container", asdict(record))
        try:
            for source in sources:
                await self._link(record.id, source.filename, self.files.path(source.id), source.bytes)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._drop(record.id)
            raise
        log.info("container.created", container_id=record.id, files=len(sources))
        return record

    async def find(self, container_id: str, owner: str, *, touch: bool = True) -> ContainerRecord:
        """The caller's container, marked active now; another key's, a missing or an expired one: 404."""
        found = await self.objects.get("container", container_id)
        if found is None or found["owner"] != owner:
            raise RequestError(f"No such Container: {container_id}", "container_id", 404, "not_found")
        record = ContainerRecord(**found)
        if touch:
            record.last_active_at = int(time.time())
            record.expires_at = record.last_active_at + 60 * record.minutes
            await self.objects.put("container", asdict(record))
        return record

    async def listing(self, owner: str, *, limit: int, order: str, after: str | None, name: str | None) -> dict:
        records = [ContainerRecord(**o) for o in await self.objects.owned("container", owner)]
        return page([r for r in records if name is None or r.name == name], limit=limit, order=order, after=after)

    async def delete(self, container_id: str, owner: str) -> None:
        await self.find(container_id, owner, touch=False)
        await self._drop(container_id)
        log.info("container.deleted", container_id=container_id)

    async def _drop(self, container_id: str) -> None:
        """Delete a container's files (records and bytes), then the container."""
        for obj in await self.objects.owned("container_file", container_id):
            await self._drop_file(obj["id"])
        await self.objects.delete("container", container_id)
        if self.on_drop is not None:
            await self.on_drop(container_id)

    async def _drop_file(self, file_id: str) -> None:
        await self.objects.delete("container_file", file_id)
        await anyio.Path(self.files.path(file_id)).unlink(missing_ok=True)

    async def _new_file(
        self, container_id: str, name: str, size: int, file_id: str, source: str = "user"
    ) -> ContainerFile:
        now = int(time.time())
        record = ContainerFile(
            file_id, container_id, f"{DATA_DIR}/{name}", size, now, source, now + int(self.retention_s)
        )
        await self.objects.put("container_file", asdict(record))
        return record

    async def _taken(self, container_id: str, name: str) -> None:
        if any(o["path"] == f"{DATA_DIR}/{name}" for o in await self.objects.owned("container_file", container_id)):
            raise RequestError(f"{DATA_DIR}/{name} already exists in container {container_id}", "file")

    async def _link(self, container_id: str, name: str, source: Path, size: int) -> ContainerFile:
        await self._taken(container_id, name)
        file_id = "cfile_" + secrets.token_hex(16)
        target = self.files.path(file_id)
        try:
            await anyio.to_thread.run_sync(_link_or_copy, source, target)
            return await self._new_file(container_id, name, size, file_id)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.Path(target).unlink(missing_ok=True)
            raise

    async def add_file(self, container_id: str, owner: str, request: Request) -> ContainerFile:
        """A file added by upload (multipart `file`) or by `file_id` (JSON); its path is /mnt/data/NAME."""
        await self.find(container_id, owner)
        if request.headers.get("content-type", "").startswith("multipart/"):
            file_id = "cfile_" + secrets.token_hex(16)
            limit, too_large = await self.files.room(owner)
            async with receive_upload(request, self.files.path(file_id), limit, frozenset(), too_large) as form:
                name = form.filename or ""  # one path component: checked as the part arrived
                await self._taken(container_id, name)
                return await self._new_file(container_id, name, form.size, file_id)
        spec = AddFile.model_validate(await json_body(request))
        source = await self.files.find(spec.file_id, owner)
        return await self._link(container_id, source.filename, self.files.path(source.id), source.bytes)

    async def find_file(self, container_id: str, file_id: str, owner: str) -> ContainerFile:
        await self.find(container_id, owner)
        found = await self.objects.get("container_file", file_id)
        if found is None or found["owner"] != container_id:
            raise RequestError(f"No such Container File: {file_id}", "file_id", 404, "not_found")
        return ContainerFile(**found)

    async def files_of(self, container_id: str) -> list[ContainerFile]:
        """A container's files (the caller checked the container is the owner's)."""
        return [ContainerFile(**o) for o in await self.objects.owned("container_file", container_id)]

    def output_room(self, left: int | None, replaced: int) -> tuple[int, str]:
        """The most bytes a file the code wrote may be saved with, and the bound that says so: the file size
        limit, or less where the key's files leave less (`left`, `Files.left`); the file it replaces (`replaced`
        bytes) frees its bytes."""
        if left is None or left + replaced >= self.files.max_bytes:
            return self.files.max_bytes, f"the file size limit, {self.files.max_bytes} bytes"
        room = max(0, left + replaced)
        bound = f"--max-file-bytes-per-key, {self.files.max_bytes_per_key} bytes for this key's files"
        return room, f"the {room} bytes left by {bound}"

    async def store_output(self, container_id: str, name: str, chunks: AsyncIterator[bytes]) -> ContainerFile:
        """A file the code wrote at /mnt/data/NAME (NAME may hold `/`): its bytes streamed to the volume, then
        recorded with source "assistant". A file already at that path is replaced: the code changed it, and
        the platform's copy follows the sandbox (the old id goes with its old bytes)."""
        file_id = "cfile_" + secrets.token_hex(16)
        target = anyio.Path(self.files.path(file_id))
        part = target.with_name(f".part-{file_id}")
        size = 0
        try:
            async with await anyio.open_file(part, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    await out.write(chunk)
            await part.rename(target)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await part.unlink(missing_ok=True)
            raise
        for old in await self.files_of(container_id):
            if old.path == f"{DATA_DIR}/{name}":
                await self._drop_file(old.id)
        return await self._new_file(container_id, name, size, file_id, "assistant")

    async def files_page(self, container_id: str, owner: str, *, limit: int, order: str, after: str | None) -> dict:
        await self.find(container_id, owner)
        records = [ContainerFile(**o) for o in await self.objects.owned("container_file", container_id)]
        return page(records, limit=limit, order=order, after=after)

    async def delete_file(self, container_id: str, file_id: str, owner: str) -> None:
        await self.find_file(container_id, file_id, owner)
        await self._drop_file(file_id)

    async def prune(self) -> None:
        """Expired containers go with their files; a file past the retention goes alone."""
        for container_id in await self.objects.take_expired("container"):
            await self._drop(container_id)
            log.info("container.expired", container_id=container_id)
        for file_id in await self.objects.take_expired("container_file"):
            await anyio.Path(self.files.path(file_id)).unlink(missing_ok=True)


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link on the same volume (deleting either name keeps the other's bytes), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        shutil.copyfile(source, target)
