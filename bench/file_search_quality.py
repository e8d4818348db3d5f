"""Retrieval quality of file_search on a labelled set from the Python documentation (Debian's python3-doc).

Each documented function (`<dl class="py function">`) gives one pair: its description's first sentence is the
query, its page the answer. A sample of the pages that document functions is indexed the product's way (parse,
auto chunking, all-MiniLM-L6-v2 on the CPU, the store), which is also the ingestion figure; a sample of their
pairs is asked three ways - BM25 alone, vectors alone, hybrid (the default) - and each scores MRR@10: the mean of
1/rank of the answer page's first chunk among the top 10, 0 when absent. The store's vectors are exact, so its
vector recall@10 is 1.0 by construction; usearch's HNSW (the graph option the engine does not use) is scored
against it on these real vectors. Used by `bench.file_search`.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from selectolax.lexbor import LexborHTMLParser
from tokenizers import Tokenizer

from tools.file_search.chunking import AUTO, Chunker
from tools.file_search.embedders import LocalEmbedder
from tools.file_search.engine import Engine
from tools.file_search.store import Ranking, Store
from tools.file_search.vectors.exact import ExactEngine, ExactIndex

DOCS = Path("/usr/share/doc/python3-doc/html")
OWNER, STORE = "bench", "vs_quality"
MODES = {
    "BM25 alone": Ranking(embedding_weight=0.0, text_weight=1.0, score_threshold=1e-9),
    "vectors alone": Ranking(embedding_weight=1.0, text_weight=0.0, score_threshold=1e-9),
    "hybrid (RRF, the default)": Ranking(),
}
"""A weight of 0 still lists that side's candidates, at score 0: the threshold drops them."""


@dataclass(frozen=True, slots=True)
class Pair:
    query: str
    page: str


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]


def pairs_of(page: Path) -> list[Pair]:
    """One pair per documented function of the page whose description says something (four words or more)."""
    tree = LexborHTMLParser(page.read_text(errors="replace"))
    found = []
    for entry in tree.css("dl.py.function > dd"):
        paragraph = entry.css_first("p")
        query = first_sentence(paragraph.text()) if paragraph else ""
        if len(query.split()) >= 4:
            found.append(Pair(query, page.name))
    return found


def labelled_set(pages: int, pairs: int, seed: int) -> tuple[list[Path], list[Pair]]:
    """`pages` pages of the library reference that document functions, and `pairs` of their pairs, by `seed`."""
    documented = {p: pairs_of(p) for p in sorted((DOCS / "library").glob("*.html"))}
    rng = random.Random(seed)
    chosen = rng.sample(sorted(p for p, found in documented.items() if found), pages)
    pool = [pair for page in chosen for pair in documented[page]]
    return chosen, rng.sample(pool, min(pairs, len(pool)))


async def index_pages(engine: Engine, pages: list[Path]) -> dict[str, Any]:
    chunks, started = 0, time.perf_counter()
    for page in pages:
        file = {"file_id": page.stem.replace(".", "_"), "filename": page.name, "attributes": {}}
        chunks += (await engine.index_file(OWNER, STORE, file, page.read_bytes(), AUTO)).chunks
    elapsed = time.perf_counter() - started
    return {
        "name": f"ingest {len(pages)} doc pages (parse+chunk+embed+add), auto chunking",
        "chunks": chunks,
        "chunks_per_s": round(chunks / elapsed, 2),
    }


def mrr_rows(store: Store, pairs: list[Pair], vectors: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for name, ranking in MODES.items():
        reciprocal = []
        for pair, vector in zip(pairs, vectors, strict=True):
            pages = [hit.filename for hit in store.search(vector, pair.query, 10, None, ranking)]
            reciprocal.append(1 / (pages.index(pair.page) + 1) if pair.page in pages else 0.0)
        found = sum(r > 0 for r in reciprocal)
        rows.append({"name": f"MRR@10, {name}", "mrr@10": round(float(np.mean(reciprocal)), 3), "in_top10": found})
    return rows


def hnsw(matrix: np.ndarray, queries: np.ndarray, what: str) -> tuple[dict[str, Any], Any]:
    """usearch's HNSW (default settings) over `matrix` against exact search: a row with the share of the true top
    10 it finds, and the index (None where usearch is not installed)."""
    try:
        from usearch.index import Index  # optional: pip install usearch
    except ImportError:
        return {"name": f"usearch HNSW ({what})", "skipped": "usearch not installed"}, None
    index = Index(ndim=matrix.shape[1], metric="cos")
    started = time.perf_counter()
    index.add(np.arange(len(matrix)), matrix)
    build_s = time.perf_counter() - started
    found = index.search(queries, 10).keys
    truth = np.argsort(-(queries @ matrix.T), axis=1)[:, :10]
    recall = np.mean([len(set(f.tolist()) & set(t.tolist())) / 10 for f, t in zip(found, truth, strict=True)])
    row = {
        "name": f"usearch HNSW recall@10 vs exact ({what})",
        "rows": len(matrix),
        "build_s": round(build_s, 2),
        "recall@10": round(float(recall), 3),
    }
    return row, index


async def quality_rows(model_dir: Path, root: Path, pages: int, pairs: int, seed: int) -> list[dict[str, Any]]:
    """Index the sampled pages, then score the sampled pairs each way; the ingestion row comes first."""
    chosen, asked = labelled_set(pages, pairs, seed)
    embedder = LocalEmbedder(model_dir, 32)
    chunker = Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json")))
    engine = Engine(root, embedder, chunker, ExactEngine())
    rows = [await index_pages(engine, chosen)]
    store = Store(root / "stores" / OWNER / STORE, ExactEngine())
    vectors = await embedder.embed([pair.query for pair in asked])
    rows.append({"name": "labelled set", "pages": len(chosen), "pairs": len(asked), "seed": seed})
    rows += mrr_rows(store, asked, vectors)
    rows.append({"name": "store vector recall@10 vs exact", "recall@10": 1.0, "why": "the store's search is exact"})
    matrix = np.ascontiguousarray(ExactIndex(store.directory).matrix())
    rows.append(hnsw(matrix, vectors, "these pages' chunk vectors, the labelled queries")[0])
    return rows
