"""The `exact` vector engine and the store over it, in process: rows are appended (never the file rewritten),
a dead writer's partial row is cut off, a store in the old one-`vectors.npy` layout is converted and still
found, and `Live` masks and owns exactly the rows its files claim."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tools.file_search.store import Ranking, Store
from tools.file_search.vectors import Live
from tools.file_search.vectors.exact import ExactEngine, ExactIndex

RNG = np.random.default_rng(3)


def unit(n: int, dims: int = 8) -> np.ndarray:
    vectors = RNG.standard_normal((n, dims)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def meta(file_id: str) -> dict[str, object]:
    return {"file_id": file_id, "filename": f"{file_id}.txt", "attributes": {}, "bytes": 0}


def test_adds_append_rows_and_a_partial_row_is_cut_off(tmp_path: Path) -> None:
    store = Store(tmp_path / "o" / "s", ExactEngine())
    first, second = unit(3), unit(2)
    store.add("a", meta("a"), ["one", "two", "three"], first)
    rows = tmp_path / "o" / "s" / "vectors.f32"
    inode, before = rows.stat().st_ino, rows.read_bytes()
    with open(rows, "ab") as out:
        out.write(b"\x01\x02\x03")  # what a writer that died mid-row leaves
    store.add("b", meta("b"), ["four", "five"], second)
    assert rows.stat().st_ino == inode and rows.read_bytes()[: len(before)] == before  # appended in place
    assert store.files()["b"]["start"] == 3 and store.files()["b"]["end"] == 5
    matrix = ExactIndex(tmp_path / "o" / "s").matrix()
    assert matrix is not None and np.array_equal(matrix[3:], second)
    hits = store.search(second[1], "five", 1, None, Ranking(text_weight=0))
    assert [(h.file_id, h.text) for h in hits] == [("b", "five")]


def test_a_store_of_the_old_layout_is_converted_and_found(tmp_path: Path) -> None:
    directory = tmp_path / "o" / "old"
    old = Store(directory, ExactEngine())
    vectors = unit(2)
    old.add("a", meta("a"), ["alpha", "beta"], vectors)
    (directory / "vectors.f32").unlink()
    (directory / "vectors.json").unlink()
    np.save(directory / "vectors.npy", vectors)  # as the store wrote it before it appended
    store = Store(directory, ExactEngine())
    assert not (directory / "vectors.npy").exists()
    hits = store.search(vectors[1], "beta", 1, None, Ranking(text_weight=0))
    assert [(h.file_id, h.text) for h in hits] == [("a", "beta")]


def test_live_masks_and_owns_only_the_rows_its_files_claim() -> None:
    live = Live.of({"x": {"start": 5, "end": 8}, "y": {"start": 0, "end": 2}}, complete=False)
    assert live.file_ids == ("y", "x")
    assert live.mask(10).tolist() == [True, True, False, False, False, True, True, True, False, False]
    assert live.owners(np.array([0, 1, 2, 5, 7, 8, 40])).tolist() == [0, 0, -1, 1, 1, -1, -1]
    assert Live.of({}, complete=True).owners(np.array([0])).tolist() == [-1]
