"""Vector stores (`/v1/vector_stores`), their files and file batches: records in the object store, the index in
the `file_search` tool server (reached through the gateway, signed with the caller's key).

Adding a file answers at once with `in_progress`; its bytes (from `/v1/files`) are indexed in the background
(`ingest.py`), and the record turns `completed` (with its `usage_bytes`) or `failed` with `last_error`. Another
key's store, or a file or batch of a store that is not the caller's, is the same 404 as a missing one. A store
with `expires_after` expires that many days after its last activity (a search, an added or changed file); the
prune job then removes its index and files, and the store answers `expired` until it is deleted. Not built:
`description` (refused as an unknown field) and `rewrite_query` (refused).
"""

from orchestrator.vector_stores.batches import CreateBatch, FileBatches
from orchestrator.vector_stores.ingest import Limits
from orchestrator.vector_stores.records import (
    AddFile,
    CreateStore,
    FileRecord,
    Search,
    StoreRecord,
    UpdateFile,
    UpdateStore,
    owned_store,
    usable_store,
)
from orchestrator.vector_stores.stores import STALE_MARGIN_S, VectorStores

__all__ = [
    "STALE_MARGIN_S",
    "AddFile",
    "CreateBatch",
    "CreateStore",
    "FileBatches",
    "FileRecord",
    "Limits",
    "Search",
    "StoreRecord",
    "UpdateFile",
    "UpdateStore",
    "VectorStores",
    "owned_store",
    "usable_store",
]
