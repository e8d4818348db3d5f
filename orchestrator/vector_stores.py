"""Vector stores (`/v1/vector_stores`) and their files: records in the object store, the index in the
`file_search` tool server (reached through the gateway, signed with the caller's key).

Adding a file answers at once with `in_progress`; its bytes (from `/v1/files`) are sent to the tool server's
`index_file` in the background, a few at a time, and the record turns `completed` (with its `usage_bytes`) or
`failed` with `last_error`. Another key's store, or a file of a store that is not the caller's, is the same 404
as a missing one. Not built yet: `expires_after` and `description` (refused as unknown fields), `rewrite_query`
(refused), `file_batches`, updating a file's attributes and a file's parsed content (no routes: 404).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import RequestError
from orchestrator.files import Files, page
from orchestrator.persist import Objects
from orchestrator.tools import ToolOutcome, ToolSessions

log = structlog.get_logger(__name__)
FOREVER_S = 10 * 365 * 86400
"""A store without `expires_after` is kept until deleted (the object store wants an expiry)."""
Attributes = dict[str, str | float | bool]
STALE_MARGIN_S = 60
"""Past the tool call's timeout, how long before a file still `in_progress` (and not queued here) is deemed cut
off by a stop of the replica that indexed it."""


class CreateStore(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str | None = Field(None, max_length=256)
    file_ids: list[str] = Field(default_factory=list, max_length=500)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    chunking_strategy: dict[str, Any] | None = None


class UpdateStore(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str | None = Field(None, max_length=256)
    metadata: dict[str, str] | None = Field(None, max_length=16)


class AddFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    file_id: str
    attributes: Attributes | None = Field(None, max_length=16)
    chunking_strategy: dict[str, Any] | None = None


class Search(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int = Field(10, ge=1, le=50)
    ranking_options: dict[str, Any] | None = None
    rewrite_query: Literal[False] = False


@dataclass
class StoreRecord:
    id: str
    owner: str
    name: str | None
    created_at: int
    last_active_at: int
    metadata: dict[str, str] | None
    expires_at: int

    def body(self, files: list[FileRecord]) -> dict[str, Any]:
        """`openai.types.VectorStore`."""
        counts = {s: sum(f.status == s for f in files) for s in ("in_progress", "completed", "failed", "cancelled")}
        return {
            "id": self.id,
            "object": "vector_store",
            "created_at": self.created_at,
            "name": self.name or "",
            "usage_bytes": sum(f.usage_bytes for f in files),
            "file_counts": counts | {"total": len(files)},
            "status": "in_progress" if counts["in_progress"] else "completed",
            "last_active_at": self.last_active_at,
            "metadata": self.metadata,
            "expires_after": None,
            "expires_at": None,
        }


@dataclass
class FileRecord:
    id: str
    """`<store id>/<file id>`: a file may be in several stores."""
    owner: str
    """The store's id: a store lists its files as a key lists its objects."""
    file_id: str
    created_at: int
    expires_at: int
    status: str = "in_progress"
    usage_bytes: int = 0
    last_error: dict[str, str] | None = None
    attributes: Attributes | None = None
    chunking: dict[str, Any] = field(default_factory=lambda: {"type": "auto"})

    def body(self) -> dict[str, Any]:
        """`openai.types.vector_stores.VectorStoreFile`."""
        static = self.chunking.get("static") or {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}
        return {
            "id": self.file_id,
            "object": "vector_store.file",
            "created_at": self.created_at,
            "vector_store_id": self.owner,
            "status": self.status,
            "usage_bytes": self.usage_bytes,
            "last_error": self.last_error,
            "attributes": self.attributes,
            "chunking_strategy": {"type": "static", "static": static},
        }


@dataclass(frozen=True)
class _Shown:
    """An object as `page` lists it: its cursor (a file's is its file id, which the SDK sends back as `after`)
    and its body, made beforehand."""

    id: str
    shown: dict[str, Any]

    def body(self) -> dict[str, Any]:
        return self.shown


def failure(outcome: ToolOutcome) -> dict[str, str]:
    """OpenAI's `last_error` for a failed index call: what the tool said, and whose fault (the tool's side broke,
    e.g. its embedding service: the kit's "file_search unavailable: ..." - not the file's fault)."""
    if outcome.kind != "tool_error" or "file_search unavailable: " in outcome.text:
        return {"code": "server_error", "message": outcome.text}
    code = "unsupported_file" if "unsupported file type" in outcome.text else "invalid_file"
    return {"code": code, "message": outcome.text}


async def owned_store(objects: Objects, store_id: str, owner: str, where: str) -> StoreRecord:
    """The store `store_id` if `owner` made it; another key's or a missing one: the same 404 naming `where`."""
    found = await objects.get("vector_store", store_id)
    if found is None or found["owner"] != owner:
        raise RequestError(f"No such vector store: {store_id}", where, 404, "not_found")
    return StoreRecord(**found)


class VectorStores:
    """Every key's vector stores; the index lives in the file_search tool server at `url`."""

    def __init__(self, files: Files, url: str | None, *, concurrency: int = 2, timeout_s: float = 600.0) -> None:
        self.files, self.objects, self.url = files, files.objects, url
        self.timeout_s = timeout_s
        self.limiter = anyio.CapacityLimiter(concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending: set[str] = set()
        """File records this replica has queued or is indexing."""

    async def tool(self, owner: str, name: str, args: dict[str, Any]) -> ToolOutcome:
        """One call to the file_search tool server for `owner` (one tool session per key, which holds nothing)."""
        sessions = ToolSessions(session_id=f"vector-stores-{owner}", timeout_s=self.timeout_s, owner=owner)
        return await sessions.call_once(self._url(), name, args)

    def _url(self) -> str:
        if self.url is None:
            raise RequestError("vector stores need the file_search tool: this server has no --tools-url", None, 501)
        return self.url

    async def create(self, spec: CreateStore, owner: str) -> StoreRecord:
        sources = [await self.files.find(fid, owner) for fid in spec.file_ids]  # each the caller's: else 404
        now = int(time.time())
        record = StoreRecord("vs_" + secrets.token_hex(16), owner, spec.name, now, now, spec.metadata, now + FOREVER_S)
        await self.objects.put("vector_store", asdict(record))
        for source in sources:
            await self.add_file(record.id, owner, AddFile(file_id=source.id, chunking_strategy=spec.chunking_strategy))
        log.info("vector_store.created", vector_store_id=record.id, files=len(sources))
        return record

    async def find(self, store_id: str, owner: str) -> StoreRecord:
        """The caller's store; another key's or a missing one: the same 404."""
        return await owned_store(self.objects, store_id, owner, "vector_store_id")

    async def body(self, record: StoreRecord) -> dict[str, Any]:
        return record.body(await self.store_files(record.id))

    async def store_files(self, store_id: str) -> list[FileRecord]:
        return [await self._current(o) for o in await self.objects.owned("vector_store_file", store_id)]

    async def _current(self, obj: dict[str, Any]) -> FileRecord:
        """A file record as it stands: one `in_progress` that no replica can still be indexing (not queued here,
        and older than a call may last) was cut off by a stop, and is failed so that its store settles."""
        record = FileRecord(**obj)
        interrupted = time.time() - record.created_at > self.timeout_s + STALE_MARGIN_S
        if record.status == "in_progress" and record.id not in self.pending and interrupted:
            message = "indexing was interrupted (the server running it stopped); add the file again"
            record.status, record.last_error = "failed", {"code": "server_error", "message": message}
            await self.objects.put("vector_store_file", asdict(record))
        return record

    async def listing(self, owner: str, *, limit: int, order: str, after: str | None) -> dict[str, Any]:
        records = [StoreRecord(**o) for o in await self.objects.owned("vector_store", owner)]
        return page([_Shown(r.id, await self.body(r)) for r in records], limit=limit, order=order, after=after)

    async def update(self, store_id: str, owner: str, spec: UpdateStore) -> StoreRecord:
        record = await self.find(store_id, owner)
        for name in spec.model_fields_set:
            setattr(record, name, getattr(spec, name))
        record.last_active_at = int(time.time())
        await self.objects.put("vector_store", asdict(record))
        return record

    async def delete(self, store_id: str, owner: str) -> None:
        await self.find(store_id, owner)
        files = await self.objects.owned("vector_store_file", store_id)
        if files:  # a store never given a file has no index to delete
            outcome = await self.tool(owner, "delete_store", {"vector_store_id": store_id})
            if outcome.is_error:
                raise RequestError(f"the file_search tool could not delete the index: {outcome.text}", None, 502)
        for obj in files:
            await self.objects.delete("vector_store_file", obj["id"])
        await self.objects.delete("vector_store", store_id)
        log.info("vector_store.deleted", vector_store_id=store_id)

    async def add_file(self, store_id: str, owner: str, spec: AddFile) -> FileRecord:
        """Record the file `in_progress` and index it in the background (again, if it was there: idempotent)."""
        self._url()
        await self.find(store_id, owner)
        source = await self.files.find(spec.file_id, owner)
        now = int(time.time())
        chunking = spec.chunking_strategy or {"type": "auto"}
        record = FileRecord(
            f"{store_id}/{source.id}",
            store_id,
            source.id,
            now,
            now + FOREVER_S,
            attributes=spec.attributes,
            chunking=chunking,
        )
        await self.objects.put("vector_store_file", asdict(record))
        self.pending.add(record.id)
        task = asyncio.create_task(self._ingest(record, owner, source.filename))
        task.add_done_callback(lambda _: self.pending.discard(record.id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return record

    async def _ingest(self, record: FileRecord, owner: str, filename: str) -> None:
        async with self.limiter:
            try:
                data = await anyio.Path(self.files.path(record.file_id)).read_bytes()
            except OSError as exc:
                await self._settle(record, ToolOutcome(f"the file's bytes could not be read: {exc}", True))
                return
            args = {
                "vector_store_id": record.owner,
                "file_id": record.file_id,
                "filename": filename,
                "content_base64": base64.b64encode(data).decode(),
                "attributes": record.attributes,
                "chunking_strategy": record.chunking if record.chunking.get("type") == "static" else None,
            }
            outcome = await self.tool(owner, "index_file", args)
        await self._settle(record, outcome)

    async def _settle(self, record: FileRecord, outcome: ToolOutcome) -> None:
        if await self.objects.get("vector_store_file", record.id) is None:
            return  # deleted while it was indexed: the delete removed it from the index too
        if outcome.is_error:
            record.status, record.last_error = "failed", failure(outcome)
        else:
            record.status, record.usage_bytes = "completed", int((outcome.structured or {}).get("usage_bytes", 0))
        await self.objects.put("vector_store_file", asdict(record))
        log.info(
            "vector_store.file_indexed", vector_store_id=record.owner, file_id=record.file_id, status=record.status
        )

    async def find_file(self, store_id: str, file_id: str, owner: str) -> FileRecord:
        await self.find(store_id, owner)
        found = await self.objects.get("vector_store_file", f"{store_id}/{file_id}")
        if found is None:
            raise RequestError(f"No such file in vector store {store_id}: {file_id}", "file_id", 404, "not_found")
        return await self._current(found)

    async def files_page(
        self, store_id: str, owner: str, *, limit: int, order: str, after: str | None, status: str | None
    ) -> dict[str, Any]:
        await self.find(store_id, owner)
        records = [r for r in await self.store_files(store_id) if status in (None, r.status)]
        return page([_Shown(r.file_id, r.body()) for r in records], limit=limit, order=order, after=after)

    async def delete_file(self, store_id: str, file_id: str, owner: str) -> None:
        record = await self.find_file(store_id, file_id, owner)
        await self.objects.delete("vector_store_file", record.id)
        outcome = await self.tool(owner, "delete_file", {"vector_store_id": store_id, "file_id": file_id})
        if outcome.is_error:
            raise RequestError(f"the file_search tool could not remove the file: {outcome.text}", None, 502)

    async def search(self, store_id: str, owner: str, spec: Search) -> dict[str, Any]:
        """`vector_stores.search`: one query (a list of one), the page OpenAI answers."""
        await self.find(store_id, owner)
        queries = [spec.query] if isinstance(spec.query, str) else spec.query
        if len(queries) != 1:
            raise RequestError("query: one query is searched at a time (a list of several is not supported)", "query")
        page_ = {"object": "vector_store.search_results.page", "search_query": queries, "has_more": False}
        if not await self.objects.owned("vector_store_file", store_id):
            return page_ | {"data": [], "next_page": None}  # nothing indexed: nothing to ask the tool
        args = {
            "vector_store_ids": [store_id],
            "query": queries[0],
            "max_num_results": spec.max_num_results,
            "filters": spec.filters,
            "ranking_options": spec.ranking_options,
        }
        outcome = await self.tool(owner, "search", args)
        if outcome.kind == "tool_error":
            raise RequestError(outcome.text, None)
        if outcome.is_error:
            raise RequestError(f"the file_search tool failed: {outcome.text}", None, 502)
        results = (outcome.structured or {}).get("results", [])
        data = [
            {k: r[k] for k in ("file_id", "filename", "score", "attributes")}
            | {"content": [{"type": "text", "text": r["text"]}]}
            for r in results
        ]
        return page_ | {"data": data, "next_page": None}

    async def aclose(self) -> None:
        """Stop the ingestion in flight (its files stay `in_progress`: added again, they are indexed anew)."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
