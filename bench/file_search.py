"""file_search's engine, in process: ingestion throughput with the real model, and query latency at N chunks.

    python -m bench.file_search [--chunks 10000] [--sample 256] [--queries 200] [--out FILE]

Ingestion: pages of the Python documentation (Debian's python3-doc) go through the whole path - parse, chunk
(auto: 800/400 tokens), embed with all-MiniLM-L6-v2 on the CPU, add to a store - until `--sample` chunks.
Query latency at `--chunks`: a store holding that many real chunks of the same pages; their vectors are random
unit vectors (embedding 10k chunks here takes longer than the bench may; exact search costs the same for any
vectors), so this measures the engines, not retrieval quality. Baseline in the same run: exact search alone in
numpy over the memory-mapped matrix; then the store's hybrid search (vector + BM25 + fusion + filters' file map);
then usearch's HNSW where the package is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bench.report import print_rows, save
from tools.file_search.chunking import AUTO, Chunker
from tools.file_search.embedders import LocalEmbedder
from tools.file_search.engine import Engine
from tools.file_search.minilm import extract_packaged_model
from tools.file_search.parse import extract_text
from tools.file_search.store import Ranking, Store

DOCS = Path("/usr/share/doc/python3-doc/html")
QUERIES = ["how do I sort a list by a key", "open a file for reading", "regular expression groups", "thread pool"]


def pages(limit: int) -> list[Path]:
    return sorted(DOCS.rglob("*.html"))[:limit]


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    """p50 and p99 of `n` calls, in milliseconds."""
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "p50_ms": round(float(np.percentile(samples, 50)), 3),
        "p99_ms": round(float(np.percentile(samples, 99)), 3),
    }


async def ingestion(model_dir: Path, data_dir: Path, sample: int) -> dict[str, Any]:
    engine = Engine(
        data_dir, LocalEmbedder(model_dir, 32), Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    )
    chunks, started = 0, time.perf_counter()
    for i, page in enumerate(pages(10_000)):
        file = {"file_id": f"file-{i}", "filename": page.name, "attributes": {}}
        chunks += (await engine.index_file("bench", "vs_ingest", file, page.read_bytes(), AUTO)).chunks
        if chunks >= sample:
            break
    elapsed = time.perf_counter() - started
    query_embed = timed(lambda: engine.embedder.model.encode([QUERIES[0]]), 20)  # type: ignore[attr-defined]
    return {
        "name": "ingest (parse+chunk+embed+add), auto chunking",
        "chunks": chunks,
        "chunks_per_s": round(chunks / elapsed, 2),
        "query_embed": query_embed,
    }


def corpus_chunks(model_dir: Path, n: int) -> list[tuple[str, list[str]]]:
    """(page name, its chunks) until `n` chunks, 200-token chunks (so a few pages make many)."""
    chunker = Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    rule = AUTO.model_copy(update={"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 0})
    out, total = [], 0
    for page in pages(100_000):
        texts = chunker.chunks(extract_text(page.name, page.read_bytes()), rule)
        out.append((page.name, texts))
        total += len(texts)
        if total >= n:
            break
    return out


def build_store(directory: Path, docs: list[tuple[str, list[str]]], dims: int) -> tuple[Store, float]:
    rng = np.random.default_rng(0)
    store, total, started = Store(directory), 0, time.perf_counter()
    for i, (name, texts) in enumerate(docs):
        vectors = rng.standard_normal((len(texts), dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        store.add(
            f"file-{i}", {"file_id": f"file-{i}", "filename": name, "attributes": {"n": i}, "bytes": 0}, texts, vectors
        )
        total += len(texts)
    return store, total / (time.perf_counter() - started)


def latency_rows(store: Store, queries: int, dims: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    q = rng.standard_normal(dims).astype(np.float32)
    q /= np.linalg.norm(q)
    matrix = np.load(store.directory / "vectors.npy", mmap_mode="r")

    def exact() -> None:
        scores = matrix @ q
        top = np.argpartition(-scores, 10)[:10]
        top[np.argsort(-scores[top])]

    rows = [{"name": f"exact numpy top-10 over {len(matrix)} rows (baseline)", **timed(exact, queries)}]
    hybrid = lambda: store.search(q, QUERIES[0], 10, None, Ranking())  # noqa: E731
    rows.append({"name": "store hybrid search (vector+BM25+RRF), top-10", **timed(hybrid, queries)})
    try:
        from usearch.index import Index  # optional: pip install usearch
    except ImportError:
        rows.append({"name": "usearch HNSW", "skipped": "usearch not installed"})
        return rows
    index = Index(ndim=dims, metric="cos")
    started = time.perf_counter()
    index.add(np.arange(len(matrix)), np.asarray(matrix))
    build_s = time.perf_counter() - started
    found = index.search(q, 10).keys
    scores = matrix @ q
    recall = len(set(found.tolist()) & set(np.argsort(-scores)[:10].tolist())) / 10
    rows.append(
        {
            "name": "usearch HNSW top-10",
            "build_s": round(build_s, 2),
            "recall@10": recall,
            **timed(lambda: index.search(q, 10), queries),
        }
    )
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=256)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-file-search-") as tmp:
        root = Path(tmp)
        model_dir = extract_packaged_model(root)
        rows = [await ingestion(model_dir, root / "ingest", args.sample)]
        store, rate = build_store(root / "latency", corpus_chunks(model_dir, args.chunks), 384)
        rows.append(
            {"name": f"add {args.chunks} chunks with given vectors (store only)", "chunks_per_s": round(rate, 1)}
        )
        rows += latency_rows(store, args.queries, 384)
    print_rows(rows, width=60)
    save(args.out, rows, chunks=args.chunks, sample=args.sample)


if __name__ == "__main__":
    asyncio.run(main())
