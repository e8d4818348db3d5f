"""The vectors `bench.vector_engines` measures the engines on: real MiniLM embeddings, and a clustered set grown
from them.

Base set: sentences of the Python documentation (Debian's python3-doc, the corpus of `bench.file_search_quality`),
each cut to its first `WORDS` words, in a seeded order across all pages, embedded with the tool's own local
encoder (all-MiniLM-L6-v2 in numpy). Sentences rather than the tool's 800-token chunks because the encoder runs
~10 short texts/s on two shared cores and ~1/s at 150 tokens: 10k chunks would take hours. Embedded once, then
kept under `--cache` (keyed by model, count, words and seed).

Queries: the labelled set's queries (each documented function's description, first sentence), embedded the same
way: real questions whose answers are among the base passages' pages.

Grown set (past the base count, e.g. 100k): each new vector is a real base vector `b` moved part of the way towards
one of its 10 nearest real neighbours `n` (`t` uniform in 0..0.5), plus Gaussian noise with the base set's own
per-dimension spread times `NOISE`, then L2-normalised: clusters around real points that stay inside the
region and the anisotropy real MiniLM vectors occupy (random unit vectors are spread evenly over the sphere,
which is HNSW's worst case and nothing the tool sees). `NOISE` is calibrated on real vectors: a set grown 4x
from 500 real ones has the mean nearest-neighbour cosine of 2,000 real ones (0.590 against 0.585; 0.25 gave
0.88, near-duplicates).
"""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path

import numpy as np

from bench.file_search_quality import DOCS, pairs_of
from tools.file_search.minilm import MODEL_NAME, MiniLM
from tools.file_search.parse import extract_text
from tools.file_search.settings import FileSearchSettings

WORDS = 24
"""Words kept of each base sentence."""
NOISE = 0.75
"""The grown set's noise, in units of the base set's per-dimension standard deviation."""
NEIGHBOURS = 10
PART = 250
"""Texts embedded, and cached, at a time: an interrupted run keeps what it embedded."""


def sentences(count: int, seed: int) -> list[str]:
    """`count` distinct documentation sentences of 6 words or more, cut to `WORDS` words, in a seeded order."""
    found: set[str] = set()
    most = FileSearchSettings().max_text_chars
    for page in sorted(DOCS.rglob("*.html")):
        text = extract_text(page.name, page.read_bytes(), most)
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            words = sentence.split()
            if len(words) >= 6:
                found.add(" ".join(words[:WORDS]))
    if len(found) < count:
        raise SystemExit(f"the documentation has {len(found)} usable sentences, fewer than {count}")
    ordered = sorted(found)
    random.Random(seed).shuffle(ordered)  # a smaller count is a prefix of a larger one: its cached parts serve
    return ordered[:count]


def queries(count: int, seed: int) -> list[str]:
    """`count` of the labelled set's queries (each documented function's description), from every page, seeded."""
    pool = [pair.query for page in sorted((DOCS / "library").glob("*.html")) for pair in pairs_of(page)]
    return random.Random(seed).sample(pool, min(count, len(pool)))


def embedded(model: MiniLM, texts: list[str], cache: Path, what: str) -> np.ndarray:
    """The texts' vectors, embedded `PART` at a time, each part kept in `cache` and read from there next time."""
    return np.concatenate([_part(model, texts[i : i + PART], cache, what) for i in range(0, len(texts), PART)])


def _part(model: MiniLM, texts: list[str], cache: Path, what: str) -> np.ndarray:
    digest = hashlib.sha256("\n".join([MODEL_NAME, *texts]).encode()).hexdigest()[:16]
    path = cache / f"{what}-{len(texts)}-{digest}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # batches of like lengths pad little
    vectors = np.empty((len(texts), model.dimensions), dtype=np.float32)
    for start in range(0, len(order), 32):
        batch = order[start : start + 32]
        vectors[batch] = model.encode([texts[i] for i in batch])
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial.npy")
    np.save(partial, vectors)
    partial.replace(path)
    return vectors


def grown(base: np.ndarray, total: int, seed: int) -> np.ndarray:
    """`base`, then `total - len(base)` vectors clustered around its points (see the module's docstring)."""
    extra = total - len(base)
    if extra <= 0:
        return base[:total]
    rng = np.random.default_rng(seed)
    near = _nearest(base, NEIGHBOURS)
    origin = rng.integers(0, len(base), extra)
    towards = near[origin, rng.integers(0, NEIGHBOURS, extra)]
    t = rng.uniform(0.0, 0.5, (extra, 1)).astype(np.float32)
    spread = base.std(axis=0) * NOISE
    moved = base[origin] + t * (base[towards] - base[origin]) + rng.standard_normal((extra, base.shape[1])) * spread
    moved = (moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float32)
    return np.ascontiguousarray(np.concatenate([base, moved]))


def _nearest(base: np.ndarray, k: int) -> np.ndarray:
    """Each base row's `k` nearest other rows by cosine, exactly, a block of rows at a time."""
    out = np.empty((len(base), k), dtype=np.int64)
    for start in range(0, len(base), 2048):
        scores = base[start : start + 2048] @ base.T
        scores[np.arange(len(scores)), np.arange(start, start + len(scores))] = -np.inf
        out[start : start + len(scores)] = np.argpartition(-scores, k, axis=1)[:, :k]
    return out
