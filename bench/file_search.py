"""file_search: ingestion, retrieval quality, and query latency at N chunks in process and through MCP.

    python -m bench.file_search [--sizes 10000,100000] [--pages 24] [--pairs 200] [--queries 100]
                                [--hnsw-max 10000] [--chroma-max 10000] [--out FILE]

Quality and ingestion (`bench.file_search_quality`): `--pages` pages of the Python documentation indexed with
the real model, `--pairs` labelled queries scored by MRR@10 for BM25, vectors and hybrid; HNSW's recall@10 on
those real vectors. Latency at each of `--sizes`: a store holding that many real 200-token chunks of the same
pages (the pages again in turn past the corpus's end); their vectors are random unit vectors (embedding 100k
chunks here would take hours; exact search costs the same for any vectors), so these rows measure the engines,
not retrieval quality. Baselines in the same run: exact top-10 in numpy over the memory-mapped matrix, and an
MCP call the server refuses at once (the round trip's floor); then the store's hybrid search with a given
vector, the engine's (the query embedded too), the same search through a real file_search server over
streamable HTTP (the lean client of `bench.wire`, as the gateway's calls arrive), and usearch's HNSW for stores
up to `--hnsw-max` chunks (building it over 100k took 11 minutes on two shared cores). Stores up to
`--chroma-max` chunks are built again with the `chroma` engine in a real Chroma server (`chroma run` from
`deploy/scripts/setup_chroma.sh`'s venv): its add rate, its hybrid search time and its vector recall@10
against exact's, same texts and vectors.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench.file_search_quality import DOCS, hnsw, quality_rows
from bench.report import print_rows, save
from bench.wire import wire_session
from tests.support.chroma import chroma_server
from tests.support.service import running_service
from toolkit.wire import OWNER_HEADER, sign_owner
from tools.file_search.chunking import Chunker, StaticChunking
from tools.file_search.embedders import LocalEmbedder
from tools.file_search.engine import Engine
from tools.file_search.minilm import MiniLM, extract_packaged_model
from tools.file_search.parse import extract_text
from tools.file_search.settings import FileSearchSettings
from tools.file_search.store import Ranking, Store
from tools.file_search.vectors import Live, VectorEngine
from tools.file_search.vectors.chroma import ChromaEngine
from tools.file_search.vectors.exact import ExactEngine, ExactIndex

QUERIES = ["how do I sort a list by a key", "open a file for reading", "regular expression groups", "thread pool"]
OWNER = "bench"
DIMS = 384
PER_FILE = 1000
"""Chunks per file of the latency stores."""


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(float(np.percentile(samples, 50)), 3),
        "p99_ms": round(float(np.percentile(samples, 99)), 3),
    }


def timed(fn: Callable[[int], Any], n: int) -> dict[str, float]:
    """p50 and p99 of `n` calls `fn(i)`, in milliseconds."""
    samples = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - started) * 1000)
    return summary(samples)


async def timed_async(fn: Callable[[int], Awaitable[Any]], n: int) -> dict[str, float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        await fn(i)
        samples.append((time.perf_counter() - started) * 1000)
    return summary(samples)


def corpus_texts(model_dir: Path, n: int) -> list[str]:
    """`n` 200-token chunks of the documentation's pages, the pages again in turn past the corpus's end."""
    chunker = Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    rule = StaticChunking(max_chunk_size_tokens=200, chunk_overlap_tokens=0)
    texts: list[str] = []
    most = FileSearchSettings().max_text_chars
    for page in sorted(DOCS.rglob("*.html")):
        texts += chunker.chunks(extract_text(page.name, page.read_bytes(), most), rule)
        if len(texts) >= n:
            break
    return list(itertools.islice(itertools.cycle(texts), n))


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def build_store(directory: Path, texts: list[str], vectors: VectorEngine) -> tuple[Store, dict[str, Any]]:
    rng = np.random.default_rng(0)
    store, started = Store(directory, vectors), time.perf_counter()
    for i in range(0, len(texts), PER_FILE):
        part = texts[i : i + PER_FILE]
        meta = {"file_id": f"file-{i}", "filename": f"part-{i}.txt", "attributes": {"n": i}, "bytes": 0}
        store.add(f"file-{i}", meta, part, unit_vectors(rng, len(part)))
    rate = len(texts) / (time.perf_counter() - started)
    return store, {"name": f"add {len(texts)} chunks with given vectors (store only)", "chunks_per_s": round(rate, 1)}


async def in_process_rows(store: Store, engine: Engine, size: int, n: int, hnsw_max: int) -> list[dict[str, Any]]:
    queries = unit_vectors(np.random.default_rng(1), 50)
    matrix = ExactIndex(store.directory).matrix()
    assert matrix is not None

    def exact(i: int) -> None:
        scores = matrix @ queries[i % len(queries)]
        top = np.argpartition(-scores, 10)[:10]
        top[np.argsort(-scores[top])]

    def hybrid(i: int) -> None:
        store.search(queries[i % len(queries)], QUERIES[i % len(QUERIES)], 10, None, Ranking())

    def engine_search(i: int) -> Awaitable[Any]:
        return engine.search(OWNER, [store.directory.name], QUERIES[i % len(QUERIES)], 10, None, Ranking())

    return [
        {"name": f"{size}: exact numpy top-10 (baseline)", **timed(exact, n)},
        {"name": f"{size}: store hybrid search, given vector", **timed(hybrid, n)},
        {"name": f"{size}: engine search (embed query + hybrid)", **await timed_async(engine_search, n)},
        usearch_latency_row(np.ascontiguousarray(matrix), queries, size, n)
        if size <= hnsw_max
        else {"name": f"{size}: usearch HNSW", "skipped": f"above --hnsw-max {hnsw_max} (its build takes minutes)"},
    ]


def usearch_latency_row(matrix: np.ndarray, queries: np.ndarray, size: int, n: int) -> dict[str, Any]:
    """HNSW's recall on random vectors (its worst case) and its query time, beside exact search's."""
    row, index = hnsw(matrix, queries, "random unit vectors")
    if index is None:
        return row
    return {**row, "name": f"{size}: usearch HNSW top-10", **timed(lambda i: index.search(queries[i % 50], 10), n)}


async def mcp_rows(url: str, sizes: list[int], n: int) -> list[dict[str, Any]]:
    """Through a real file_search server: the floor (a call refused before any work), then each store's search."""
    rows = []
    async with wire_session(url, {OWNER_HEADER: sign_owner(OWNER)}) as session:
        refused = {"vector_store_ids": [], "query": "x"}
        floor = await timed_async(lambda i: searched(session, refused, True), n)
        rows.append({"name": "MCP: a refused search (baseline floor)", **floor})
        for size in sizes:
            asked = [{"vector_store_ids": [f"vs_{size}"], "query": q} for q in QUERIES]
            await searched(session, asked[0], False)
            ms = await timed_async(lambda i, asked=asked: searched(session, asked[i % len(asked)], False), n)
            rows.append({"name": f"{size}: MCP search (lean client)", **ms})
    return rows


async def searched(session: Any, args: dict[str, Any], error: bool) -> None:
    """One `search` call, which must fail (`error`) or not."""
    answer = await session.call_tool("search", args)
    if answer.is_error != error:
        raise RuntimeError(f"search {args}: {answer.text[:300]}")


def chroma_rows(exact: Store, texts: list[str], root: Path, n: int) -> list[dict[str, Any]]:
    """The same store (same texts, same vectors) in a real Chroma server: its add rate, its search time beside
    exact's, and its vector recall@10 against exact's over the 50 query vectors."""
    size = len(texts)
    with chroma_server(root / "chroma") as url:
        engine = ChromaEngine(FileSearchSettings(vector_engine="chroma", chroma_url=url))
        store, added = build_store(root / f"chroma-{size}", texts, engine)
        queries = unit_vectors(np.random.default_rng(1), 50)
        live = Live.of(store.files(), complete=True)
        found = [store.vectors.query(q, live, 10) for q in queries]
        truth = [exact.vectors.query(q, live, 10) for q in queries]
        recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth, strict=True)])
        timed_search = timed(lambda i: store.search(queries[i % 50], QUERIES[i % 4], 10, None, Ranking()), n)
        engine.close()
    return [
        {**added, "name": f"{size}: chroma, add with given vectors (store + server)"},
        {"name": f"{size}: chroma vector recall@10 vs exact", "recall@10": round(float(recall), 3)},
        {"name": f"{size}: chroma store hybrid search, given vector", **timed_search},
    ]


async def latency_rows(model_dir: Path, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    sizes, n = [int(s) for s in args.sizes.split(",")], args.queries
    texts = corpus_texts(model_dir, max(sizes))
    chunker = Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    engine = Engine(root, LocalEmbedder(model_dir, 32), chunker, ExactEngine())
    rows: list[dict[str, Any]] = []
    for size in sizes:
        store, added = build_store(root / "stores" / OWNER / f"vs_{size}", texts[:size], ExactEngine())
        rows += [added, *await in_process_rows(store, engine, size, n, args.hnsw_max)]
        if size <= args.chroma_max:
            rows += chroma_rows(store, texts[:size], root / "chroma", n)
    flags = ["-m", "tools.file_search", "--data-dir", str(root), "--model-dir", str(model_dir), "--drain-s", "0"]
    with running_service(flags, timeout_s=120) as svc:
        rows += await mcp_rows(svc.url, sizes, n)
    return rows


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="chunks in the latency stores, comma-separated")
    parser.add_argument("--pages", type=int, default=24, help="documentation pages indexed for quality")
    parser.add_argument("--pairs", type=int, default=200, help="labelled queries scored")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=100, help="timed queries per latency row")
    parser.add_argument("--hnsw-max", type=int, default=10_000, help="largest store also indexed by usearch HNSW")
    parser.add_argument("--chroma-max", type=int, default=10_000, help="largest store also put in Chroma (0: none)")
    parser.add_argument("--out")
    return parser.parse_args()


def main() -> None:
    args = parse()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-file-search-") as tmp:
        root = Path(tmp)
        model_dir = extract_packaged_model(root)
        rows = asyncio.run(quality_rows(model_dir, root / "quality", args.pages, args.pairs, args.seed))
        model = MiniLM(model_dir)
        rows.append({"name": "embed one query (local model)", **timed(lambda i: model.encode([QUERIES[0]]), 20)})
        rows += asyncio.run(latency_rows(model_dir, root / "latency", args))
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")  # the local model's speed on a shared machine hangs on it
    print_rows([*rows, {"name": "OPENBLAS_NUM_THREADS", "value": blas}], width=56)
    save(args.out, rows, sizes=sizes, pages=args.pages, pairs=args.pairs, seed=args.seed, openblas_threads=blas)


if __name__ == "__main__":
    main()
