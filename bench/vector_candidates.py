"""The engines `bench.vector_engines` compares, each behind one small adapter: build from all vectors (ids are
row numbers), search top-k, flush and close, reopen from its directory, delete ids, and (graph indexes only) set
the search effort. Inner product on unit vectors everywhere (cosine). Each adapter imports its library when
built, so a missing one is a skipped row, not a failed bench; a deletion the library cannot do raises
`Unsupported`, whose message says so.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


class Unsupported(RuntimeError):
    """The engine cannot do this (its message says what the library answered)."""


class Candidate(ABC):
    """The adapter's shape. `graph` adapters take `m` (links per node) and an effort (ef_search) per query."""

    name: ClassVar[str]
    module: ClassVar[str]
    """The library's import name: absent means the candidate is skipped."""
    needs: ClassVar[tuple[str, ...]] = ()
    """Other modules it cannot run without, checked the same way."""
    graph: ClassVar[bool] = False
    EF_CONSTRUCTION: ClassVar[int] = 128

    def __init__(self, directory: Path, dims: int, m: int) -> None:
        self.directory, self.dims, self.m = directory, dims, m
        directory.mkdir(parents=True, exist_ok=True)
        self.lib: Any = importlib.import_module(self.module)
        self.extra = {name: importlib.import_module(name) for name in self.needs}

    @abstractmethod
    def build(self, vectors: np.ndarray) -> None: ...

    @abstractmethod
    def search(self, query: np.ndarray, k: int) -> np.ndarray: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def delete(self, ids: np.ndarray) -> None: ...

    def effort(self, ef: int) -> None:
        raise Unsupported(f"{self.name} is exact: it has no search effort")


class ExactNumpy(Candidate):
    """The tool's own: a float32 matrix saved as .npy and memory-mapped; deleted rows are masked (the store keeps
    a live-row map in files.json)."""

    name, module = "exact numpy (the tool's)", "numpy"

    def build(self, vectors: np.ndarray) -> None:
        np.save(self.directory / "vectors.npy", vectors)
        np.save(self.directory / "live.npy", np.ones(len(vectors), dtype=bool))
        self.open()

    def open(self) -> None:
        self.matrix = np.load(self.directory / "vectors.npy", mmap_mode="r")
        self.live = np.load(self.directory / "live.npy")
        self.all_live = bool(self.live.all())

    def close(self) -> None:
        del self.matrix

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        scores = self.matrix @ query
        if not self.all_live:
            scores = np.where(self.live, scores, -np.inf)
        top = np.argpartition(-scores, k)[:k]
        return top[np.argsort(-scores[top])]

    def delete(self, ids: np.ndarray) -> None:
        self.live[ids] = False
        self.all_live = False
        np.save(self.directory / "live.npy", self.live)


class _Faiss(Candidate, ABC):
    module = "faiss"

    @abstractmethod
    def make(self) -> Any: ...

    def build(self, vectors: np.ndarray) -> None:
        self.index = self.make()
        self.index.add_with_ids(vectors, np.arange(len(vectors), dtype=np.int64))
        self.lib.omp_set_num_threads(1)  # built on every core; queried on one, as the tool asks

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        return np.asarray(self.index.search(query[None, :], k)[1][0])

    def close(self) -> None:
        self.lib.write_index(self.index, str(self.directory / "index.faiss"))
        del self.index

    def open(self) -> None:
        self.index = self.lib.read_index(str(self.directory / "index.faiss"))

    def delete(self, ids: np.ndarray) -> None:
        try:
            self.index.remove_ids(ids.astype(np.int64))
        except RuntimeError as exc:
            raise Unsupported(f"faiss: {str(exc).splitlines()[-1][:120]}") from None


class FaissFlat(_Faiss):
    name = "faiss IndexFlatIP (exact)"

    def make(self) -> Any:
        return self.lib.IndexIDMap2(self.lib.IndexFlatIP(self.dims))


class FaissHnsw(_Faiss):
    name, graph = "faiss IndexHNSWFlat", True

    def make(self) -> Any:
        inner = self.lib.IndexHNSWFlat(self.dims, self.m, self.lib.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = self.EF_CONSTRUCTION
        return self.lib.IndexIDMap2(inner)

    def effort(self, ef: int) -> None:
        self.lib.downcast_index(self.index.index).hnsw.efSearch = ef


class Hnswlib(Candidate):
    name, module, graph = "hnswlib", "hnswlib", True

    def build(self, vectors: np.ndarray) -> None:
        self.size = len(vectors)
        self.index = self.lib.Index(space="ip", dim=self.dims)
        self.index.init_index(max_elements=self.size, ef_construction=self.EF_CONSTRUCTION, M=self.m)
        self.index.add_items(vectors, np.arange(self.size))
        self.index.set_num_threads(1)

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        return np.asarray(self.index.knn_query(query, k)[0][0])

    def close(self) -> None:
        self.ef = self.index.ef
        self.index.save_index(str(self.directory / "index.hnsw"))
        del self.index

    def open(self) -> None:
        self.index = self.lib.Index(space="ip", dim=self.dims)
        self.index.load_index(str(self.directory / "index.hnsw"), max_elements=self.size)
        self.index.set_num_threads(1)
        self.index.set_ef(self.ef)

    def delete(self, ids: np.ndarray) -> None:
        for i in ids:
            self.index.mark_deleted(int(i))

    def effort(self, ef: int) -> None:
        self.index.set_ef(max(ef, 10))


class Usearch(Candidate):
    name, module, graph = "usearch", "usearch.index", True

    def build(self, vectors: np.ndarray) -> None:
        self.index = self.new()
        self.index.add(np.arange(len(vectors)), vectors)

    def new(self) -> Any:
        return self.lib.Index(
            ndim=self.dims, metric="ip", dtype="f32", connectivity=self.m, expansion_add=self.EF_CONSTRUCTION
        )

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        return np.asarray(self.index.search(query, k, threads=1).keys)

    def close(self) -> None:
        self.ef = self.index.expansion_search
        self.index.save(str(self.directory / "index.usearch"))
        del self.index

    def open(self) -> None:
        self.index = self.new()
        self.index.load(str(self.directory / "index.usearch"))
        self.index.expansion_search = self.ef

    def delete(self, ids: np.ndarray) -> None:
        self.index.remove(ids)

    def effort(self, ef: int) -> None:
        self.index.expansion_search = ef


class SqliteVec(Candidate):
    """sqlite-vec's `vec0` table (a brute-force scan; its stable release has no ANN index), through apsw:
    Python's own sqlite3 here is built without extension loading."""

    name, module, needs = "sqlite-vec vec0 (exact)", "sqlite_vec", ("apsw",)

    def open(self) -> None:
        self.db = self.extra["apsw"].Connection(str(self.directory / "vectors.db"))
        self.db.enable_load_extension(True)
        self.db.load_extension(self.lib.loadable_path())

    def build(self, vectors: np.ndarray) -> None:
        self.open()
        self.db.execute(f"create virtual table v using vec0(embedding float[{self.dims}] distance_metric=cosine)")
        with self.db:
            self.db.executemany(
                "insert into v(rowid, embedding) values (?, ?)", ((i, row.tobytes()) for i, row in enumerate(vectors))
            )

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        rows = self.db.execute("select rowid from v where embedding match ? and k = ?", (query.tobytes(), k))
        return np.fromiter((r[0] for r in rows), dtype=np.int64)

    def close(self) -> None:
        self.db.close()

    def delete(self, ids: np.ndarray) -> None:
        with self.db:
            self.db.executemany("delete from v where rowid = ?", ((int(i),) for i in ids))


class LanceFlat(Candidate):
    """A Lance table scanned in full (no index: exact)."""

    name, module, needs = "lancedb flat (exact)", "lancedb", ("pyarrow",)

    def build(self, vectors: np.ndarray) -> None:
        pa = self.extra["pyarrow"]
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), self.dims)
        data = pa.table({"id": pa.array(np.arange(len(vectors))), "vector": column})
        self.open_db().create_table("v", data=data)
        self.open()

    def open_db(self) -> Any:
        return self.lib.connect(str(self.directory))

    def open(self) -> None:
        self.table = self.open_db().open_table("v")

    def query(self, query: np.ndarray, k: int) -> Any:
        return self.table.search(query).distance_type("cosine").select(["id", "_distance"]).limit(k)

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        return np.asarray(self.query(query, k).to_arrow()["id"])

    def close(self) -> None:
        del self.table

    def delete(self, ids: np.ndarray) -> None:
        self.table.delete(f"id IN ({', '.join(str(int(i)) for i in ids)})")


class LanceHnsw(LanceFlat):
    """Lance's IVF_HNSW_SQ index (HNSW graphs in IVF partitions over 8-bit scalar-quantised vectors)."""

    name, graph = "lancedb IVF_HNSW_SQ", True
    ef = 64

    def build(self, vectors: np.ndarray) -> None:
        super().build(vectors)
        self.table.create_index(
            metric="cosine", index_type="IVF_HNSW_SQ", m=self.m, ef_construction=self.EF_CONSTRUCTION
        )

    def query(self, query: np.ndarray, k: int) -> Any:
        return super().query(query, k).ef(self.ef)

    def effort(self, ef: int) -> None:
        self.ef = ef


CANDIDATES: dict[str, type[Candidate]] = {
    c.name: c for c in (ExactNumpy, FaissFlat, SqliteVec, LanceFlat, Hnswlib, Usearch, FaissHnsw, LanceHnsw)
}
