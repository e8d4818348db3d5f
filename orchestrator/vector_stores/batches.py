"""File batches (`/v1/vector_stores/{id}/file_batches`): many files added in one call, followed and cancelled as one.

A batch is a record of its own (kind `vector_store_file_batch`, filed under its store); its files are the store's
file records that name it, indexed by the stores' one ingestion (bounded, in the background). Cancelling marks the
batch and every file of it still `in_progress` `cancelled`: a queued one is skipped when its turn comes, and one
being indexed (on any replica) finishes, finds itself cancelled and is removed from the index again, so nothing
of a cancelled file stays searchable and nothing is half indexed. Files completed before the cancel stay.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.errors import RequestError
from orchestrator.vector_stores.records import (
    FOREVER_S,
    MAX_BATCH_FILES,
    AddFile,
    AttributesIn,
    FileRecord,
    counts,
)
from orchestrator.vector_stores.stores import VectorStores

log = structlog.get_logger(__name__)


class CreateBatch(BaseModel):
    """`file_ids` (with one `attributes` and `chunking_strategy` for all) or `files` (each its own): not both."""

    model_config = ConfigDict(extra="forbid", strict=True)
    file_ids: list[str] | None = Field(None, min_length=1, max_length=MAX_BATCH_FILES)
    files: list[AddFile] | None = Field(None, min_length=1, max_length=MAX_BATCH_FILES)
    attributes: AttributesIn | None = None
    chunking_strategy: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_list(self) -> CreateBatch:
        if (self.file_ids is None) == (self.files is None):
            raise ValueError("give either file_ids or files (one of them, not both)")
        if self.files is not None and (self.attributes is not None or self.chunking_strategy is not None):
            raise ValueError("with files, attributes and chunking_strategy go in each file, not beside the list")
        return self

    def adds(self) -> list[AddFile]:
        """One add per file; a file listed twice is refused (which of its two settings would win?)."""
        adds = self.files or [
            AddFile(file_id=f, attributes=self.attributes, chunking_strategy=self.chunking_strategy)
            for f in self.file_ids or []
        ]
        seen: set[str] = set()
        for i, add in enumerate(adds):
            if add.file_id in seen:
                where = f"files[{i}].file_id" if self.files else f"file_ids[{i}]"
                raise RequestError(f"file {add.file_id} is listed twice in the batch", where)
            seen.add(add.file_id)
        return adds


@dataclass
class BatchRecord:
    id: str
    owner: str
    """The store's id: a store files its batches as it files its files."""
    created_at: int
    expires_at: int
    cancelled: bool = False

    def body(self, files: list[FileRecord]) -> dict[str, Any]:
        """`openai.types.vector_stores.VectorStoreFileBatch`."""
        file_counts = counts([f.status for f in files])
        status: Literal["in_progress", "completed", "cancelled", "failed"] = "completed"
        if self.cancelled:
            status = "cancelled"
        elif file_counts["in_progress"]:
            status = "in_progress"
        elif file_counts["failed"] == file_counts["total"]:
            status = "failed"
        return {
            "id": self.id,
            "object": "vector_store.files_batch",
            "created_at": self.created_at,
            "vector_store_id": self.owner,
            "status": status,
            "file_counts": file_counts,
        }


class FileBatches:
    """The batches of every key's stores, over the stores' records and ingestion."""

    def __init__(self, stores: VectorStores) -> None:
        self.stores, self.objects = stores, stores.objects

    async def create(self, store_id: str, owner: str, spec: CreateBatch) -> dict[str, Any]:
        """Check every file (each the caller's, else 404 naming it), record them `in_progress`, index them."""
        self.stores.tool.reachable()
        await self.stores.usable(store_id, owner)
        adds = spec.adds()
        sources = [await self.stores.files.find(add.file_id, owner) for add in adds]
        await self.stores.room(store_id, [s.id for s in sources], "files" if spec.files else "file_ids")
        now = int(time.time())
        batch = BatchRecord("vsfb_" + secrets.token_hex(16), store_id, now, now + FOREVER_S)
        await self.objects.put("vector_store_file_batch", asdict(batch))
        added = [
            (self.stores.new_record(store_id, s.id, add, batch.id), s.filename)
            for add, s in zip(adds, sources, strict=True)
        ]
        await self.stores.queue(owner, added)
        log.info("vector_store.batch_created", vector_store_id=store_id, batch_id=batch.id, files=len(added))
        return batch.body([record for record, _ in added])

    async def find(self, store_id: str, batch_id: str, owner: str) -> BatchRecord:
        """The batch of the caller's store; another key's, another store's or a missing one: the same 404."""
        await self.stores.find(store_id, owner)
        found = await self.objects.get("vector_store_file_batch", batch_id)
        if found is None or found["owner"] != store_id:
            raise RequestError(
                f"No such file batch in vector store {store_id}: {batch_id}", "batch_id", 404, "not_found"
            )
        return BatchRecord(**found)

    async def body(self, batch: BatchRecord) -> dict[str, Any]:
        return batch.body([f for f in await self.stores.store_files(batch.owner) if f.batch_id == batch.id])

    async def cancel(self, store_id: str, batch_id: str, owner: str) -> dict[str, Any]:
        """Cancel the batch's unfinished files (see the module)."""
        batch = await self.find(store_id, batch_id, owner)
        batch.cancelled = True
        await self.objects.put("vector_store_file_batch", asdict(batch))
        for record in await self.stores.store_files(store_id):
            if record.batch_id == batch_id and record.status == "in_progress":
                record.status = "cancelled"
                await self.objects.put("vector_store_file", asdict(record))
        log.info("vector_store.batch_cancelled", vector_store_id=store_id, batch_id=batch_id)
        return await self.body(batch)
