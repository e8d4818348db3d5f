"""`chroma`: the store's vectors in a Chroma server (`chroma run`, the `chromadb` package from PyPI), over its
HTTP API (v2) with httpx, so the tool needs none of chromadb's own dependencies.

Each store is one collection (inner-product space), named from the store's owner and id (`toolfleet-` and a
hash), so every replica of the tool finds the same one. A record is one row: id the row's number, metadata its
`file_id`; the text stays in the store's BM25 index. Rows are numbered by a counter in the store's directory
(`chroma-rows`), bumped under the store's writer lock after the records are in: records a writer left before
dying are overwritten by the next add (`upsert`), and no live file claims them meanwhile. A search whose files
are all of the store's asks the whole collection; a filtered one asks `file_id $in` the files that passed the
store's attribute filter. A server that is down, slow or answering an error raises `VectorsUnavailable`, and
the call fails saying so; nothing of an add or delete that failed is visible.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tools.file_search.settings import FileSearchSettings
from tools.file_search.vectors import Live, VectorsUnavailable

COUNTER = "chroma-rows"
BATCH = 1000
"""Records per upsert (the server's limit is its `max_batch_size`, 5461 in 1.5)."""


def collection_name(directory: Path) -> str:
    """`toolfleet-` and a hash of `<owner>/<store id>` (Chroma names allow 3-512 of [a-zA-Z0-9._-])."""
    return "toolfleet-" + hashlib.sha256(f"{directory.parent.name}/{directory.name}".encode()).hexdigest()[:40]


class ChromaIndex:
    def __init__(self, client: httpx.Client, directory: Path) -> None:
        self.client = client
        self.name = collection_name(directory)
        self.counter = directory / COUNTER
        self._id: str | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            answer = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise VectorsUnavailable(f"the chroma server at {self.client.base_url} failed: {exc!r}") from exc
        if answer.status_code >= 400 and answer.status_code != 404:
            raise VectorsUnavailable(f"the chroma server answered {answer.status_code}: {answer.text[:300]}")
        return answer

    def _collection(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to one of the collection's paths, finding (or making) the collection first; once more afresh
        when the server no longer knows the id (another replica deleted the store)."""
        for _ in range(2):
            if self._id is None:
                made = {"name": self.name, "get_or_create": True, "configuration": {"hnsw": {"space": "ip"}}}
                self._id = str(self._call("POST", "/collections", made).json()["id"])
            answer = self._call("POST", f"/collections/{self._id}/{path}", body)
            if answer.status_code != 404:
                return dict(answer.json())
            self._id = None
        raise VectorsUnavailable(f"the chroma server lost collection {self.name} twice in a row")

    def add(self, file_id: str, vectors: np.ndarray) -> int:
        start = int(self.counter.read_text()) if self.counter.exists() else 0
        for at in range(0, len(vectors), BATCH):
            part = vectors[at : at + BATCH]
            ids = [str(start + at + i) for i in range(len(part))]
            records = {"ids": ids, "embeddings": part.tolist(), "metadatas": [{"file_id": file_id}] * len(ids)}
            self._collection("upsert", records)
        partial = self.counter.with_name(f".{COUNTER}.partial")
        partial.write_text(str(start + len(vectors)))
        os.replace(partial, self.counter)
        return start

    def delete(self, file_id: str) -> None:
        self._collection("delete", {"where": {"file_id": file_id}})

    def query(self, vector: np.ndarray, live: Live, depth: int) -> list[int]:
        asked: dict[str, Any] = {"query_embeddings": [vector.tolist()], "n_results": depth, "include": []}
        if not live.complete:
            asked["where"] = {"file_id": {"$in": list(live.file_ids)}}
        return [int(row) for row in self._collection("query", asked)["ids"][0]]

    def destroy(self) -> None:
        self._call("DELETE", f"/collections/{self.name}")
        self._id = None


class ChromaEngine:
    """One HTTP client (its connection pool) for every store's collection."""

    def __init__(self, settings: FileSearchSettings) -> None:
        if not settings.chroma_url:
            raise ValueError("--vector-engine chroma needs --chroma-url (the Chroma server's base URL)")
        tenant, database = settings.chroma_tenant, settings.chroma_database
        base = f"{settings.chroma_url.rstrip('/')}/api/v2/tenants/{tenant}/databases/{database}"
        self.client = httpx.Client(base_url=base, timeout=settings.chroma_timeout_s)

    def open(self, directory: Path) -> ChromaIndex:
        return ChromaIndex(self.client, directory)

    def close(self) -> None:
        self.client.close()
