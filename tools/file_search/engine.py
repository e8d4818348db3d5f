"""Retrieval for every owner: index a file into a store (parse, chunk, embed, add), delete, search.

Stores live under `<data_dir>/stores/<owner>/<store_id>/`, so one owner's ids never reach another's files.
Parsing, the store's disk work and the model all run in worker threads; one file of a store is written at a time
(an asyncio lock here, an `flock` between replicas)."""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from tools.file_search.chunking import Chunker, StaticChunking
from tools.file_search.embedders import Embedder
from tools.file_search.filters import Filter
from tools.file_search.parse import extract_text
from tools.file_search.store import Hit, Ranking, Store
from tools.file_search.vectors import VectorEngine

log = structlog.get_logger(__name__)
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class BadRequest(ValueError):
    """The caller's mistake (a bad id, an unknown store): answered in these words."""


class OverBudget(BadRequest):
    """The file would take its owner past the bytes the orchestrator allows a key: refused before it is added."""


@dataclass(frozen=True, slots=True)
class Indexed:
    chunks: int
    usage_bytes: int
    seconds: float


def checked_id(value: str, what: str) -> str:
    if not _ID.fullmatch(value):
        raise BadRequest(f"{what} must be 1-128 letters, digits, '_' or '-', not {value!r}")
    return value


def _drop_unless_live(store: Store, file_id: str) -> None:
    """A failed add (the vector engine down) leaves no parsed text behind, unless an earlier copy is still live."""
    if file_id not in store.files():
        store.drop_text(file_id)


class Engine:
    def __init__(
        self, data_dir: Path, embedder: Embedder, chunker: Chunker, vectors: VectorEngine, max_text_chars: int
    ) -> None:
        self.root = data_dir / "stores"
        self.max_text_chars = max_text_chars
        self.embedder = embedder
        self.chunker = chunker
        self.vectors = vectors
        self._stores: dict[Path, Store] = {}
        self._locks: defaultdict[Path, asyncio.Lock] = defaultdict(asyncio.Lock)

    def _path(self, owner: str, store_id: str) -> Path:
        return self.root / owner / checked_id(store_id, "vector_store_id")

    async def _store(self, path: Path) -> Store:
        if path not in self._stores:
            self._stores[path] = await anyio.to_thread.run_sync(Store, path, self.vectors)
        return self._stores[path]

    async def aclose(self) -> None:
        await self.embedder.aclose()
        await anyio.to_thread.run_sync(self.vectors.close)

    async def index_file(
        self,
        owner: str,
        store_id: str,
        file: dict[str, Any],
        data: bytes,
        rule: StaticChunking,
        max_usage_bytes: int | None = None,
    ) -> Indexed:
        """Index one file (replacing an earlier copy of the same id): its text's chunks, embedded, added; one
        whose chunks and vectors would take more than `max_usage_bytes` is refused before anything is added."""
        started = time.perf_counter()
        text = await anyio.to_thread.run_sync(extract_text, file["filename"], data, self.max_text_chars)
        texts = await anyio.to_thread.run_sync(self.chunker.chunks, text, rule)
        vectors = await self.embedder.embed(texts)
        usage = sum(len(t.encode()) for t in texts) + vectors.nbytes
        if max_usage_bytes is not None and usage > max_usage_bytes:
            raise OverBudget(
                f"the file would use {usage} bytes of vector store storage, past the {max(max_usage_bytes, 0)}"
                " its key has left under the orchestrator's --max-vector-store-bytes-per-key"
            )
        path = self._path(owner, store_id)
        async with self._locks[path]:
            store = await self._store(path)
            meta = {**file, "bytes": usage}
            await anyio.to_thread.run_sync(store.keep_text, file["file_id"], text)
            try:
                await anyio.to_thread.run_sync(store.add, file["file_id"], meta, texts, vectors)
            except Exception:
                await anyio.to_thread.run_sync(_drop_unless_live, store, file["file_id"])
                raise
        elapsed = time.perf_counter() - started
        log.info("file.indexed", owner=owner, store=store_id, file_id=file["file_id"], chunks=len(texts), s=elapsed)
        return Indexed(len(texts), usage, elapsed)

    async def delete_file(self, owner: str, store_id: str, file_id: str) -> bool:
        path = self._path(owner, store_id)
        if not path.exists():
            return False
        async with self._locks[path]:
            store = await self._store(path)
            deleted = await anyio.to_thread.run_sync(store.delete, checked_id(file_id, "file_id"))
            await anyio.to_thread.run_sync(store.drop_text, file_id)
            return deleted

    async def set_attributes(self, owner: str, store_id: str, file_id: str, attributes: dict[str, Any]) -> bool:
        """Replace an indexed file's attributes in place. False: the store or the file is not there."""
        path = self._path(owner, store_id)
        if not path.exists():
            return False
        async with self._locks[path]:
            store = await self._store(path)
            return await anyio.to_thread.run_sync(store.set_attributes, checked_id(file_id, "file_id"), attributes)

    async def text(self, owner: str, store_id: str, file_id: str) -> str | None:
        """An indexed file's parsed text; None: the store or the file is not there."""
        path = self._path(owner, store_id)
        if not path.exists():
            return None
        store = await self._store(path)
        return await anyio.to_thread.run_sync(store.text, checked_id(file_id, "file_id"))

    async def delete_store(self, owner: str, store_id: str) -> bool:
        path = self._path(owner, store_id)
        if not path.exists():
            return False
        async with self._locks[path]:
            store = await self._store(path)
            await anyio.to_thread.run_sync(store.destroy)
            self._stores.pop(path, None)
        return True

    async def search(
        self, owner: str, store_ids: list[str], query: str, limit: int, where: Filter | None, ranking: Ranking
    ) -> list[Hit]:
        """The best `limit` chunks over the named stores (a store never indexed into is empty)."""
        if not query.strip():
            raise BadRequest("query must not be empty")
        paths = [self._path(owner, s) for s in store_ids]
        vector = (await self.embedder.embed([query]))[0]
        hits: list[Hit] = []
        for path in paths:
            if path.exists():
                store = await self._store(path)
                hits += await anyio.to_thread.run_sync(store.search, vector, query, limit, where, ranking)
        return sorted(hits, key=lambda h: -h.score)[:limit]
