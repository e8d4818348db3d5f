"""`exact`: every live row scored by numpy over a memory-mapped float32 file of the store's own, no server.

`vectors.f32` holds the rows back to back, appended by each add (its row width in `vectors.json`, written once
before the first row). Readers map the whole rows the file holds when they look: a row being appended, or one
no live file claims yet, is past what `files.json` names, so it is never answered. A partial row left by a
writer that died is cut off by the next add. Rows of deleted files stay in the file, unclaimed. A store written
before this layout (one `vectors.npy`, rewritten whole by each add) is converted when first opened.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import numpy as np

from tools.file_search.settings import FileSearchSettings
from tools.file_search.vectors import Live

ROWS = "vectors.f32"
WIDTH = "vectors.json"
LEGACY = "vectors.npy"


class ExactIndex:
    def __init__(self, directory: Path) -> None:
        self.rows_path = directory / ROWS
        self.width_path = directory / WIDTH
        if (directory / LEGACY).exists():
            with open(directory / "lock", "a") as lock:  # the store's writers' lock
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._convert(directory / LEGACY)

    def _convert(self, legacy: Path) -> None:
        """The old layout's matrix as this one's rows (the rows keep their numbers), then the old file gone."""
        if not legacy.exists():
            return  # another replica converted it while this one waited for the lock
        matrix = np.load(legacy, mmap_mode="r")
        self.rows_path.unlink(missing_ok=True)
        self.width_path.unlink(missing_ok=True)
        self.add("", matrix)
        legacy.unlink()

    def _width(self) -> int | None:
        return int(json.loads(self.width_path.read_bytes())["dims"]) if self.width_path.exists() else None

    def matrix(self) -> np.ndarray | None:
        """The whole rows the file holds now, memory-mapped; None before the first."""
        width = self._width()
        if width is None or not self.rows_path.exists():
            return None
        rows = self.rows_path.stat().st_size // (4 * width)
        if rows == 0:
            return None
        return np.memmap(self.rows_path, dtype=np.float32, mode="r", shape=(rows, width))

    def add(self, file_id: str, vectors: np.ndarray) -> int:
        width = self._width()
        if width is None:
            width = vectors.shape[1]
            partial = self.width_path.with_name(f".{WIDTH}.partial")
            partial.write_text(json.dumps({"dims": width}))
            os.replace(partial, self.width_path)
        if vectors.shape[1] != width:
            raise ValueError(f"vectors of width {vectors.shape[1]} cannot join a store of width {width}")
        with open(self.rows_path, "ab") as out:
            whole = out.tell() - out.tell() % (4 * width)
            out.truncate(whole)
            out.write(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
        return whole // (4 * width)

    def delete(self, file_id: str) -> None:
        return None

    def query(self, vector: np.ndarray, live: Live, depth: int) -> list[int]:
        matrix = self.matrix()
        if matrix is None:
            return []
        rows = np.flatnonzero(live.mask(len(matrix)))
        if not rows.size:
            return []
        scores = matrix[rows] @ vector if rows.size < len(matrix) // 2 else (matrix @ vector)[rows]
        top = np.argsort(-scores)[:depth] if len(scores) <= depth else np.argpartition(-scores, depth)[:depth]
        return [int(r) for r in rows[top[np.argsort(-scores[top])]]]

    def destroy(self) -> None:
        return None


class ExactEngine:
    """Nothing is shared between stores: each index is its directory's files."""

    def __init__(self, _settings: FileSearchSettings | None = None) -> None:
        return None

    def open(self, directory: Path) -> ExactIndex:
        return ExactIndex(directory)

    def close(self) -> None:
        return None
