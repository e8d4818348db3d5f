"""One candidate at one size, measured inside its own process (see `bench.vector_engines`): build, effort sweep,
reopen, delete. The vectors, queries and exact top-10 come as .npy files; the rows go back to the parent."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.vector_candidates import CANDIDATES, Candidate, Unsupported

K = 10
DELETED_SHARE = 0.01
"""Rows deleted at once: about one file's chunks in a store of this size."""


@dataclass(frozen=True, slots=True)
class Job:
    engine: str
    size: int
    m: int
    data: Path
    efs: tuple[int, ...]
    timed: int
    target: float

    @property
    def title(self) -> str:
        return f"{self.size}: {self.engine}" + (f" M={self.m}" if self.m else "")


def rss_mib() -> float:
    """This process's resident memory (anonymous and file-backed pages both: a memory map counts once read)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def disk_mib(directory: Path) -> float:
    return round(sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 2**20, 1)


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    hits = [len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True)]
    return round(sum(hits) / truth.size, 4)


def sweep(engine: Candidate, asked: np.ndarray, truth: np.ndarray, timed: int) -> dict[str, Any]:
    """recall@10 over every query, then p50/p99 and throughput over `timed` single queries (10 untimed first)."""
    found = [engine.search(q, K) for q in asked]
    for q in asked[:10]:
        engine.search(q, K)
    ms = []
    for i in range(timed):
        started = time.perf_counter()
        engine.search(asked[i % len(asked)], K)
        ms.append((time.perf_counter() - started) * 1000)
    return {
        "recall@10": recall(found, truth),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "qps": round(1000 * len(ms) / sum(ms), 1),
    }


def efforts(engine: Candidate, job: Job, asked: np.ndarray, truth: np.ndarray) -> list[dict[str, Any]]:
    """A graph index at each ef_search, the least one reaching the target marked; it is left set there (else the
    largest)."""
    rows, chosen = [], None
    for ef in job.efs:
        engine.effort(ef)
        row = {"name": f"{job.title} ef={ef}", **sweep(engine, asked, truth, job.timed)}
        if chosen is None and row["recall@10"] >= job.target:
            chosen = row["at_target"] = ef
        rows.append(row)
    engine.effort(chosen or job.efs[-1])
    return rows


def reopened(engine: Candidate, directory: Path, asked: np.ndarray) -> dict[str, Any]:
    """Close (flushing to disk), reopen from the directory: how long, the first query, and the same answers."""
    before = [engine.search(q, K) for q in asked[:20]]
    engine.close()
    started = time.perf_counter()
    engine.open()
    opened = time.perf_counter() - started
    started = time.perf_counter()
    engine.search(asked[0], K)
    first = time.perf_counter() - started
    same = all(np.array_equal(b, engine.search(q, K)) for b, q in zip(before, asked[:20], strict=True))
    return {
        "disk_mib": disk_mib(directory),
        "reopen_ms": round(opened * 1000, 2),
        "first_query_ms": round(first * 1000, 2),
        "reopen_same": same,
    }


def deleted(engine: Candidate, vectors: np.ndarray, asked: np.ndarray) -> dict[str, Any]:
    """Delete a contiguous 1% of rows (a file's chunks) the queries hit most; then whether any comes back and the
    recall against exact search over what is left."""
    count = max(1, math.ceil(len(vectors) * DELETED_SHARE))
    hits = np.bincount(np.argmax(asked @ vectors.T, axis=1), minlength=len(vectors))
    start = int(np.argmax(np.convolve(hits, np.ones(count), mode="valid")))
    gone = np.arange(start, start + count)
    started = time.perf_counter()
    try:
        engine.delete(gone)
    except Unsupported as exc:
        return {"delete": f"no: {exc}"}
    spent = time.perf_counter() - started
    found = [engine.search(q, K) for q in asked]
    left = asked @ vectors.T
    left[:, gone] = -np.inf
    truth = np.argsort(-left, axis=1)[:, :K]
    return {
        "delete_ms": round(spent * 1000, 2),
        "deleted_found": int(sum(np.isin(f, gone).sum() for f in found)),
        "recall_after_delete": recall(found, truth),
    }


def measure(job: Job) -> list[dict[str, Any]]:
    """The job's rows: the build row (with the exact engines' sweep on it), then one per ef_search."""
    vectors = np.load(job.data / "vectors.npy")
    asked, truth = np.load(job.data / "queries.npy"), np.load(job.data / "truth.npy")
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-engine-") as tmp:
        directory = Path(tmp)
        try:
            engine = CANDIDATES[job.engine](directory, vectors.shape[1], job.m)
        except ImportError as exc:
            return [{"name": job.title, "skipped": f"not installed ({exc.name})"}]
        before, started = rss_mib(), time.perf_counter()
        engine.build(vectors)
        row: dict[str, Any] = {"name": job.title, "build_s": round(time.perf_counter() - started, 2)}
        sweeps = efforts(engine, job, asked, truth) if engine.graph else []
        row |= {} if engine.graph else sweep(engine, asked, truth, job.timed)
        row["rss_mib"] = round(rss_mib() - before, 1)
        row |= reopened(engine, directory, asked) | deleted(engine, vectors, asked)
        engine.close()
        shutil.rmtree(directory, ignore_errors=True)
    return [row, *sweeps]
