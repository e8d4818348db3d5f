"""The vector side of a store, behind one small interface so the engine is a setting (`--vector-engine`).

An engine (`VectorEngine`) is made once per server from its settings and opens one `VectorIndex` per store
directory. An index numbers its rows itself (`add` answers the first row it gave a file's vectors), forgets a
file's rows (`delete`), and answers the best rows for a query among the rows `Live` allows. BM25, the rows'
owners and fusion stay in `store.py`: an engine knows vectors, rows and file ids, never attributes, so a
search's attribute filter is applied by the store, which hands the engine only the files that pass it.

A new engine is one module with a `VectorEngine` class (taking `FileSearchSettings`) plus one line in
`ENGINES`. Its methods block; the store calls them from worker threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from toolkit import registry
from tools.file_search.settings import FileSearchSettings

ENGINES: registry.Registry = {
    "exact": "tools.file_search.vectors.exact:ExactEngine",
    "chroma": "tools.file_search.vectors.chroma:ChromaEngine",
}


class VectorsUnavailable(Exception):
    """The vector engine failed (a server down, slow or answering errors): our side broke, not the caller."""


@dataclass(frozen=True, slots=True)
class Live:
    """The files a search may answer from, as half-open row ranges sorted by their start.

    `complete`: these are all of the store's live files (no filter narrowed them), so an engine may skip
    passing the file list along; rows it answers that no file here claims are dropped by the store."""

    file_ids: tuple[str, ...]
    starts: np.ndarray
    ends: np.ndarray
    complete: bool

    @classmethod
    def of(cls, files: Mapping[str, Mapping[str, Any]], complete: bool) -> Live:
        ordered = sorted(files.items(), key=lambda item: int(item[1]["start"]))
        starts = np.array([meta["start"] for _, meta in ordered], dtype=np.int64)
        ends = np.array([meta["end"] for _, meta in ordered], dtype=np.int64)
        return cls(tuple(file_id for file_id, _ in ordered), starts, ends, complete)

    def mask(self, rows: int) -> np.ndarray:
        """A boolean mask over rows 0..rows-1: True where a file here claims the row."""
        edges = np.zeros(rows + 1, dtype=np.int64)
        np.add.at(edges, np.minimum(self.starts, rows), 1)
        np.add.at(edges, np.minimum(self.ends, rows), -1)
        return np.cumsum(edges[:rows]) > 0

    def owners(self, rows: np.ndarray) -> np.ndarray:
        """For each row, the index in `file_ids` of the file that claims it; -1 where none does."""
        at = np.searchsorted(self.starts, rows, side="right") - 1
        claimed = (at >= 0) & (rows < self.ends[np.maximum(at, 0)]) if len(self.starts) else at >= 0
        return np.where(claimed, at, -1)


class VectorIndex(Protocol):
    """One store's vectors (unit length, so the inner product ranks them)."""

    def add(self, file_id: str, vectors: np.ndarray) -> int:
        """Keep one file's vectors as consecutive rows; the first row's number."""
        ...

    def delete(self, file_id: str) -> None:
        """Forget the file's rows (an engine whose rows die with the store's `files.json` entry does nothing)."""
        ...

    def query(self, vector: np.ndarray, live: Live, depth: int) -> list[int]:
        """Up to `depth` rows of `live`, the nearest to `vector` first."""
        ...

    def destroy(self) -> None:
        """Remove what the index keeps outside the store's directory (the directory itself is the store's)."""
        ...


class VectorEngine(Protocol):
    def open(self, directory: Path) -> VectorIndex: ...

    def close(self) -> None: ...


def load_engine(settings: FileSearchSettings) -> VectorEngine:
    engine: VectorEngine = registry.load(ENGINES, settings.vector_engine, "vector engine")(settings)
    return engine
