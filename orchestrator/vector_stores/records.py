"""What the vector store API keeps and answers: the request bodies (pydantic, with OpenAI's limits), the records
of stores and their files in the object store, and the owner check every route goes through."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.errors import RequestError
from orchestrator.persist import Objects
from orchestrator.tools import ToolOutcome

FOREVER_S = 10 * 365 * 86400
"""A record's expiry in the object store: a store is kept until deleted (an expired one answers `expired`)."""
DAY_S = 86400
MAX_BATCH_FILES = 2000
"""OpenAI's most files in one file batch (`file_ids` or `files`)."""
MAX_STORE_FILES = 10_000
"""OpenAI's most files in one vector store: a store's every read lists them all."""
AttributeKey = Annotated[str, StringConstraints(max_length=64)]
AttributeValue = Annotated[str, StringConstraints(max_length=512)] | float | bool
AttributesIn = Annotated[dict[AttributeKey, AttributeValue], Field(max_length=16)]
"""OpenAI's `attributes`: at most 16 keys of at most 64 characters; strings of at most 512, numbers, booleans."""
Attributes = dict[str, str | float | bool]
Status = Literal["in_progress", "completed", "failed", "cancelled"]


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)


class CreateStore(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str | None = Field(None, max_length=256)
    file_ids: list[str] = Field(default_factory=list, max_length=500)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    chunking_strategy: dict[str, Any] | None = None
    expires_after: ExpiresAfter | None = None


class UpdateStore(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str | None = Field(None, max_length=256)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    expires_after: ExpiresAfter | None = None


class AddFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    file_id: str
    attributes: AttributesIn | None = None
    chunking_strategy: dict[str, Any] | None = None


class UpdateFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    attributes: AttributesIn | None


class Search(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int = Field(10, ge=1, le=50)
    ranking_options: dict[str, Any] | None = None
    rewrite_query: Literal[False] = False


def counts(statuses: list[str]) -> dict[str, int]:
    """`file_counts` of a store or a batch."""
    each = {s: statuses.count(s) for s in ("in_progress", "completed", "failed", "cancelled")}
    return each | {"total": len(statuses)}


@dataclass
class StoreRecord:
    id: str
    owner: str
    name: str | None
    created_at: int
    last_active_at: int
    metadata: dict[str, str] | None
    expires_at: int
    expires_after: dict[str, Any] | None = None

    def expiry(self) -> int | None:
        """When the store expires: `expires_after.days` past its last activity; None: never."""
        if self.expires_after is None:
            return None
        return self.last_active_at + int(self.expires_after["days"]) * DAY_S

    def expired(self) -> bool:
        expiry = self.expiry()
        return expiry is not None and expiry <= time.time()

    def body(self, files: list[FileRecord]) -> dict[str, Any]:
        """`openai.types.VectorStore`."""
        file_counts = counts([f.status for f in files])
        status = "in_progress" if file_counts["in_progress"] else "completed"
        return {
            "id": self.id,
            "object": "vector_store",
            "created_at": self.created_at,
            "name": self.name or "",
            "usage_bytes": sum(f.usage_bytes for f in files),
            "file_counts": file_counts,
            "status": "expired" if self.expired() else status,
            "last_active_at": self.last_active_at,
            "metadata": self.metadata,
            "expires_after": self.expires_after,
            "expires_at": self.expiry(),
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
    batch_id: str | None = None
    """The file batch that added it last, if one did."""

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
class Shown:
    """An object as `page` lists it: its cursor (a file's is its file id, which the SDK sends back as `after`)
    and its body, made beforehand."""

    id: str
    shown: dict[str, Any]

    def body(self) -> dict[str, Any]:
        return self.shown


def failure(outcome: ToolOutcome) -> dict[str, str]:
    """OpenAI's `last_error` for a failed index call: what the tool said, and whose fault (the SDK knows three
    codes, so the bytes limit is an `invalid_file` whose message names the flag); a tool whose own side broke, e.g.
    its embedding service (the kit's "file_search unavailable: ..."), is a `server_error`, not the file's fault."""
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


async def touch(objects: Objects, record: StoreRecord) -> None:
    """Mark the store active now: its expiry moves on, and so does its reaper's claim (`vector_store_expiry`)."""
    record.last_active_at = int(time.time())
    await objects.put("vector_store", asdict(record))
    expiry = record.expiry()
    if expiry is not None:
        await objects.put("vector_store_expiry", {"id": record.id, "owner": record.owner, "expires_at": expiry})


async def usable_store(objects: Objects, store_id: str, owner: str, where: str) -> StoreRecord:
    """The caller's store, for a use that makes it active (search, adding or changing files): an expired one is
    a 400 naming `where`."""
    record = await owned_store(objects, store_id, owner, where)
    if record.expired():
        raise RequestError(f"vector store {store_id} has expired (expires_after); create a new one", where)
    await touch(objects, record)
    return record
