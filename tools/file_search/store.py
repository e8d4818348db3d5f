"""One vector store on disk: BM25 over the chunks (tantivy) and the store's vector index (`vectors/`: exact numpy
search over its own file, or a Chroma server), fused by reciprocal rank.

Layout of a store's directory: `text/` (the tantivy index: row, file_id, text), `parsed/` (each file's parsed
text), `files.json` (each live file: name, attributes, its row range, bytes) and what the vector index keeps
there. A file's vectors go into the index first, which numbers their rows; its text is added under the same rows;
`files.json` is written last when a file is added, and after the index forgot the file's vectors (before its
text) when one is deleted, each time by an atomic rename, so a reader (another replica on the same volume too)
never sees half a file: a row no live file claims is not found. Writers hold an exclusive `flock` on `lock`, so
replicas sharing the volume take turns. All of it is blocking: callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from tools.file_search.filters import Filter
from tools.file_search.vectors import Live, VectorEngine

RRF_K = 60
"""The rank constant of reciprocal rank fusion (the usual 60): a hit at rank r adds weight / (RRF_K + r)."""


@dataclass(frozen=True, slots=True)
class Hit:
    file_id: str
    filename: str
    score: float
    attributes: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class Ranking:
    """How hits are fused: the weights of the vector and the BM25 ranks, and the least score kept."""

    embedding_weight: float = 1.0
    text_weight: float = 1.0
    score_threshold: float = 0.0
    depth: int = 50
    """Candidates taken from each ranking before fusion."""


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_integer_field("row", stored=True, indexed=True)
    b.add_text_field("file_id", stored=True, tokenizer_name="raw")
    b.add_text_field("text", stored=True)
    return b.build()


def _write_atomic(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


class Store:
    """A store's directory, opened; its methods block."""

    def __init__(self, directory: Path, vectors: VectorEngine) -> None:
        self.directory = directory
        (directory / "text").mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(_schema(), path=str(directory / "text"), reuse=True)
        self.vectors = vectors.open(directory)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def files(self) -> dict[str, dict[str, Any]]:
        path = self.directory / "files.json"
        return json.loads(path.read_bytes()) if path.exists() else {}

    def add(self, file_id: str, meta: dict[str, Any], texts: list[str], vectors: np.ndarray) -> None:
        """Add (or replace) one file's chunks and their vectors."""
        with self._locked():
            files = self.files()
            if file_id in files:
                self._forget(files, file_id)
            start = self.vectors.add(file_id, vectors)
            writer = self.index.writer(heap_size=32 * 1024 * 1024)
            for offset, text in enumerate(texts):
                writer.add_document(tantivy.Document(row=start + offset, file_id=file_id, text=text))
            writer.commit()
            writer.wait_merging_threads()
            files[file_id] = {**meta, "start": start, "end": start + len(texts)}
            _write_atomic(self.directory / "files.json", json.dumps(files).encode())

    def delete(self, file_id: str) -> bool:
        """Remove one file from the store: out of search as soon as this returns. False: it was not there."""
        with self._locked():
            files = self.files()
            if file_id not in files:
                return False
            self._forget(files, file_id)
            return True

    def _forget(self, files: dict[str, dict[str, Any]], file_id: str) -> None:
        self.vectors.delete(file_id)
        del files[file_id]
        _write_atomic(self.directory / "files.json", json.dumps(files).encode())
        writer = self.index.writer(heap_size=16 * 1024 * 1024)
        writer.delete_documents_by_term("file_id", file_id)
        writer.commit()
        writer.wait_merging_threads()

    def set_attributes(self, file_id: str, attributes: dict[str, Any]) -> bool:
        """Replace one live file's attributes (filters see them at once; nothing is embedded again). False: the
        file is not in the store."""
        with self._locked():
            files = self.files()
            if file_id not in files:
                return False
            files[file_id]["attributes"] = attributes
            _write_atomic(self.directory / "files.json", json.dumps(files).encode())
            return True

    def keep_text(self, file_id: str, text: str) -> None:
        """Keep a file's parsed text (what the API's file `content` answers), written before the file goes live."""
        (self.directory / "parsed").mkdir(exist_ok=True)
        _write_atomic(self.directory / "parsed" / f"{file_id}.txt", text.encode())

    def drop_text(self, file_id: str) -> None:
        (self.directory / "parsed" / f"{file_id}.txt").unlink(missing_ok=True)

    def text(self, file_id: str) -> str | None:
        """A live file's parsed text; None: the file is not in the store."""
        path = self.directory / "parsed" / f"{file_id}.txt"
        if file_id not in self.files() or not path.exists():
            return None
        return path.read_text()

    def destroy(self) -> None:
        with self._locked():
            self.vectors.destroy()
            shutil.rmtree(self.directory)

    def search(self, vector: np.ndarray, query: str, limit: int, where: Filter | None, ranking: Ranking) -> list[Hit]:
        """The best `limit` chunks of files that pass `where`, by fused rank, at least `score_threshold`."""
        files = self.files()
        passing = {k: v for k, v in files.items() if where is None or where.matches(v["attributes"])}
        if not passing:
            return []
        live = Live.of(passing, complete=len(passing) == len(files))
        fused: dict[int, float] = {}
        for rank, row in enumerate(_claimed(self.vectors.query(vector, live, ranking.depth), live)):
            fused[row] = fused.get(row, 0.0) + ranking.embedding_weight / (RRF_K + rank + 1)
        for rank, row in enumerate(self._text_rows(query, live, ranking.depth)):
            fused[row] = fused.get(row, 0.0) + ranking.text_weight / (RRF_K + rank + 1)
        best = (ranking.embedding_weight + ranking.text_weight) / (RRF_K + 1)
        ranked = sorted(((score / best, row) for row, score in fused.items()), reverse=True)
        kept = [(score, row) for score, row in ranked if score >= ranking.score_threshold][:limit]
        owners = live.owners(np.array([row for _, row in kept], dtype=np.int64))
        metas = [passing[live.file_ids[at]] for at in owners]
        return [self._hit(row, score, meta) for (score, row), meta in zip(kept, metas, strict=True)]

    def _text_rows(self, query: str, live: Live, depth: int) -> list[int]:
        self.index.reload()
        parsed, _errors = self.index.parse_query_lenient(query, ["text"])
        searcher = self.index.searcher()
        hits = searcher.search(parsed, limit=depth * 4, count=False).hits
        return _claimed([int(searcher.doc(address)["row"][0]) for _, address in hits], live)[:depth]

    def _hit(self, row: int, score: float, meta: dict[str, Any]) -> Hit:
        searcher = self.index.searcher()
        found = searcher.search(tantivy.Query.term_query(self.index.schema, "row", row), limit=1).hits
        text = searcher.doc(found[0][1])["text"][0] if found else ""
        return Hit(meta["file_id"], meta["filename"], round(score, 6), meta["attributes"], text)


def _claimed(rows: list[int], live: Live) -> list[int]:
    """`rows` in their order, less those no file of `live` claims (a deleted file's, a half-added one's)."""
    owners = live.owners(np.array(rows, dtype=np.int64))
    return [row for row, at in zip(rows, owners, strict=True) if at >= 0]
