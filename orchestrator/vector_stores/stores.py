"""Every key's vector stores and their files, over the object store and the file_search tool."""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict
from typing import Any

import structlog

from orchestrator.errors import RequestError
from orchestrator.files import Files, page
from orchestrator.vector_stores.ingest import IndexTool, Ingestion, Limits
from orchestrator.vector_stores.records import (
    FOREVER_S,
    MAX_STORE_FILES,
    AddFile,
    CreateStore,
    FileRecord,
    Search,
    Shown,
    StoreRecord,
    UpdateFile,
    UpdateStore,
    owned_store,
    touch,
    usable_store,
)

log = structlog.get_logger(__name__)
DEFAULT_LIMITS = Limits()
STALE_MARGIN_S = 60
"""Past the tool call's timeout, how long before a file still `in_progress` (and not queued here) is deemed cut
off by a stop of the replica that indexed it."""


class VectorStores:
    """Every key's vector stores; the index lives in the file_search tool server at `url`."""

    def __init__(
        self,
        files: Files,
        url: str | None,
        limits: Limits = DEFAULT_LIMITS,
        *,
        timeout_s: float = 600.0,
    ) -> None:
        self.files, self.objects, self.timeout_s = files, files.objects, timeout_s
        self.tool = IndexTool(url, timeout_s)
        self.ingestion = Ingestion(files, self.tool, limits)
        self.max_stores = limits.max_stores_per_key

    async def create(self, spec: CreateStore, owner: str) -> StoreRecord:
        if len(await self.objects.owned("vector_store", owner)) >= self.max_stores:
            message = f"this key has {self.max_stores} vector stores, its most (--max-vector-stores-per-key)"
            raise RequestError(message + ": delete one first", None)
        sources = [await self.files.find(fid, owner) for fid in spec.file_ids]  # each the caller's: else 404
        if sources:
            self.tool.reachable()
        now = int(time.time())
        expires_after = spec.expires_after.model_dump() if spec.expires_after else None
        record = StoreRecord(
            "vs_" + secrets.token_hex(16), owner, spec.name, now, now, spec.metadata, now + FOREVER_S, expires_after
        )
        await touch(self.objects, record)
        added = [
            (
                self.new_record(record.id, s.id, AddFile(file_id=s.id, chunking_strategy=spec.chunking_strategy)),
                s.filename,
            )
            for s in sources
        ]
        await self.queue(owner, added)
        log.info("vector_store.created", vector_store_id=record.id, files=len(sources))
        return record

    def new_record(self, store_id: str, file_id: str, spec: AddFile, batch_id: str | None = None) -> FileRecord:
        now = int(time.time())
        chunking = spec.chunking_strategy or {"type": "auto"}
        return FileRecord(
            f"{store_id}/{file_id}",
            store_id,
            file_id,
            now,
            now + FOREVER_S,
            attributes=spec.attributes,
            chunking=chunking,
            batch_id=batch_id,
        )

    async def queue(self, owner: str, added: list[tuple[FileRecord, str]]) -> None:
        """Record each file `in_progress` and index them in the background (again, if one was there: the index
        replaces it, so adding a file twice is idempotent)."""
        for record, _ in added:
            await self.objects.put("vector_store_file", asdict(record))
        if added:
            self.ingestion.start(owner, added)

    async def room(self, store_id: str, file_ids: list[str], where: str) -> None:
        """Refuse (400 naming `where`) files that would take the store past OpenAI's `MAX_STORE_FILES` (a file
        it holds already is added again in place)."""
        held = {o["file_id"] for o in await self.objects.owned("vector_store_file", store_id)}
        if len(held | set(file_ids)) > MAX_STORE_FILES:
            message = f"vector store {store_id} holds {len(held)} files; a store holds at most {MAX_STORE_FILES}"
            raise RequestError(message, where)

    async def find(self, store_id: str, owner: str) -> StoreRecord:
        """The caller's store; another key's or a missing one: the same 404."""
        return await owned_store(self.objects, store_id, owner, "vector_store_id")

    async def usable(self, store_id: str, owner: str) -> StoreRecord:
        """The caller's store, not expired, now active."""
        return await usable_store(self.objects, store_id, owner, "vector_store_id")

    async def body(self, record: StoreRecord) -> dict[str, Any]:
        return record.body(await self.store_files(record.id))

    async def store_files(self, store_id: str) -> list[FileRecord]:
        return [await self._current(o) for o in await self.objects.owned("vector_store_file", store_id)]

    async def _current(self, obj: dict[str, Any]) -> FileRecord:
        """A file record as it stands: one `in_progress` that no replica can still be indexing (not queued here,
        and older than a call may last) was cut off by a stop, and is failed so that its store settles."""
        record = FileRecord(**obj)
        interrupted = time.time() - record.created_at > self.timeout_s + STALE_MARGIN_S
        if record.status == "in_progress" and record.id not in self.ingestion.pending and interrupted:
            message = "indexing was interrupted (the server running it stopped); add the file again"
            record.status, record.last_error = "failed", {"code": "server_error", "message": message}
            await self.objects.put("vector_store_file", asdict(record))
        return record

    async def listing(
        self, owner: str, *, limit: int, order: str, after: str | None, before: str | None
    ) -> dict[str, Any]:
        records = [StoreRecord(**o) for o in await self.objects.owned("vector_store", owner)]
        shown = [Shown(r.id, await self.body(r)) for r in records]
        return page(shown, limit=limit, order=order, after=after, before=before)

    async def update(self, store_id: str, owner: str, spec: UpdateStore) -> StoreRecord:
        """New name, metadata or expiry policy; an update is activity (an expired store stays expired: a 400)."""
        record = await self.usable(store_id, owner)
        for name in spec.model_fields_set:
            value = getattr(spec, name)
            setattr(record, name, value.model_dump() if name == "expires_after" and value else value)
        await touch(self.objects, record)
        if record.expires_after is None:
            await self.objects.delete("vector_store_expiry", store_id)
        return record

    async def delete(self, store_id: str, owner: str) -> None:
        await self.find(store_id, owner)
        await self._drop_index(store_id, owner)
        for batch in await self.objects.owned("vector_store_file_batch", store_id):
            await self.objects.delete("vector_store_file_batch", batch["id"])
        await self.objects.delete("vector_store", store_id)
        await self.objects.delete("vector_store_expiry", store_id)
        log.info("vector_store.deleted", vector_store_id=store_id)

    async def _drop_index(self, store_id: str, owner: str) -> None:
        """Remove the store's index (through the tool) and its file records."""
        files = await self.objects.owned("vector_store_file", store_id)
        if files:  # a store never given a file has no index to delete
            await self.tool.must(owner, "delete_store", {"vector_store_id": store_id}, "delete the index")
        for obj in files:
            await self.objects.delete("vector_store_file", obj["id"])

    async def prune(self) -> None:
        """Reap the stores whose expiry passed (each claimed once across replicas): their index and files go,
        the store stays, answering `expired`, until it is deleted."""
        for store_id in await self.objects.take_expired("vector_store_expiry"):
            found = await self.objects.get("vector_store", store_id)
            if found is None or not (record := StoreRecord(**found)).expired():
                continue  # deleted, or active again since its claim was made
            try:
                await self._drop_index(store_id, record.owner)
            except RequestError as exc:  # the tool is away: claim it again for the next round
                log.warning("vector_store.reap_failed", vector_store_id=store_id, error=str(exc))
                await self.objects.put("vector_store_expiry", {"id": store_id, "owner": record.owner, "expires_at": 0})
                continue
            log.info("vector_store.expired", vector_store_id=store_id)

    async def add_file(self, store_id: str, owner: str, spec: AddFile) -> FileRecord:
        """Record the file `in_progress` and index it in the background (again, if it was there: idempotent)."""
        self.tool.reachable()
        await self.usable(store_id, owner)
        source = await self.files.find(spec.file_id, owner)
        await self.room(store_id, [source.id], "file_id")
        record = self.new_record(store_id, source.id, spec)
        await self.queue(owner, [(record, source.filename)])
        return record

    async def find_file(self, store_id: str, file_id: str, owner: str) -> FileRecord:
        await self.find(store_id, owner)
        found = await self.objects.get("vector_store_file", f"{store_id}/{file_id}")
        if found is None:
            raise RequestError(f"No such file in vector store {store_id}: {file_id}", "file_id", 404, "not_found")
        return await self._current(found)

    async def files_page(
        self, store_id: str, owner: str, *, status: str | None, batch_id: str | None = None, **cursor: Any
    ) -> dict[str, Any]:
        """A page of the store's files (of one batch, when `batch_id` names it), `status` alone if given."""
        await self.find(store_id, owner)
        records = [
            r for r in await self.store_files(store_id) if status in (None, r.status) and batch_id in (None, r.batch_id)
        ]
        return page([Shown(r.file_id, r.body()) for r in records], **cursor)

    async def update_file(self, store_id: str, file_id: str, owner: str, spec: UpdateFile) -> FileRecord:
        """New attributes: in the record, and in the index at once for a file indexed (one being indexed gets
        them when it finishes)."""
        await self.usable(store_id, owner)
        record = await self.find_file(store_id, file_id, owner)
        record.attributes = spec.attributes
        await self.objects.put("vector_store_file", asdict(record))
        if record.status == "completed":
            args = {"vector_store_id": store_id, "file_id": file_id, "attributes": spec.attributes}
            await self.tool.must(owner, "set_attributes", args, "update the attributes")
        return record

    async def content(self, store_id: str, file_id: str, owner: str) -> dict[str, Any]:
        """The file's parsed text, as OpenAI pages it (`vector_store.file_content.page` of text parts)."""
        await self.usable(store_id, owner)
        record = await self.find_file(store_id, file_id, owner)
        if record.status != "completed":
            raise RequestError(f"file {file_id} is {record.status}: its content exists once it is completed", "file_id")
        args = {"vector_store_id": store_id, "file_id": file_id}
        outcome = await self.tool.must(owner, "file_content", args, "read the file's content")
        text = (outcome.structured or {}).get("text", "")
        data = [{"type": "text", "text": text}]
        return {"object": "vector_store.file_content.page", "data": data, "has_more": False, "next_page": None}

    async def delete_file(self, store_id: str, file_id: str, owner: str) -> None:
        record = await self.find_file(store_id, file_id, owner)
        await self.objects.delete("vector_store_file", record.id)
        args = {"vector_store_id": store_id, "file_id": file_id}
        await self.tool.must(owner, "delete_file", args, "remove the file")

    async def search(self, store_id: str, owner: str, spec: Search) -> dict[str, Any]:
        """`vector_stores.search`: one query (a list of one), the page OpenAI answers."""
        await self.usable(store_id, owner)
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
        outcome = await self.tool.must(owner, "search", args, "search")
        results = (outcome.structured or {}).get("results", [])
        data = [
            {k: r[k] for k in ("file_id", "filename", "score", "attributes")}
            | {"content": [{"type": "text", "text": r["text"]}]}
            for r in results
        ]
        return page_ | {"data": data, "next_page": None}

    async def aclose(self) -> None:
        await self.ingestion.aclose()
