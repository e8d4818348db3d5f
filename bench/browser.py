"""Figures of the browser: index build rate, search latency at 10k and 100k documents, cached open, find, RSS.

Usage: python -m bench.browser [--sizes 10000,100000] [--n 200] [--out results.json]

Engines (tantivy, kept; bm25s, measured for the comparison) index the same generated corpus in
process; the server rows are MCP `tools/call` round trips (streamable HTTP) to a real browser server over
the largest index and the fixture web on 127.0.0.1, each timed twice: through the `mcp` 2.x SDK's client and
through the lean client of `bench.wire` (how the gateway's calls arrive; the SDK client's own CPU is about 1 ms
a call here). The baseline is the gpt-oss reference approach for `open`: html2text over the whole page on every call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import tempfile
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report import print_rows, save
from bench.wire import CLIENTS, client_session
from tests.browser.web import TEA, browser_args, web_app, write_corpus
from tests.support.asgi import serve_asgi
from tests.support.service import running_service
from tools.browser.backends.local import SearchIndex, update_index
from tools.browser.core import Browser, Options
from tools.browser.corpus import Corpus
from tools.browser.extract import html_document
from tools.browser.fetch import Fetcher, FetchLimits
from tools.browser.settings import BrowserSettings


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000", help="generated corpus sizes (documents)")
    p.add_argument("--n", type=int, default=200, help="calls measured per row")
    p.add_argument("--files", type=int, default=5000, help="HTML files for the corpus-directory index rate")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def row(name: str, ms: list[float] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if ms:
        out |= {
            "n": len(ms),
            "p50_ms": round(pct(ms, 50), 3),
            "p99_ms": round(pct(ms, 99), 3),
            "mean_ms": round(statistics.fmean(ms), 3),
        }
    return out | extra


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


# --- the generated corpus ------------------------------------------------------------------------


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return list(dict.fromkeys("".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(size * 2)))[:size]


def documents(n: int, seed: int = 7) -> tuple[list[tuple[str, str, str, str, int]], list[str]]:
    """n documents of ~60 words drawn Zipf-like from one vocabulary, and 3-word queries over it."""
    rng = random.Random(seed)
    words = vocabulary(rng)
    weights = [1 / (i + 1) for i in range(len(words))]
    docs = []
    for i in range(n):
        body = " ".join(rng.choices(words, weights, k=60))
        docs.append((f"corpus://bench/{i}.txt", f"{i}.txt", " ".join(rng.choices(words, weights, k=5)), body, 0))
    queries = [" ".join(rng.choices(words[50:2000], k=3)) for _ in range(500)]
    return docs, queries


def tantivy_rows(docs: list, queries: list[str], n: int, directory: Path) -> list[dict[str, Any]]:
    index = SearchIndex(directory)
    start = time.perf_counter()
    index.add(docs)
    rate = len(docs) / (time.perf_counter() - start)
    it = iter(queries * (n // len(queries) + 1))
    ms = timed(lambda: index.search(next(it), 10), n)
    return [row(f"tantivy {len(docs)} docs: search top 10 with snippets", ms, index_docs_per_s=round(rate))]


def bm25s_rows(docs: list, queries: list[str], n: int) -> list[dict[str, Any]]:
    try:
        import bm25s
    except ImportError:
        return [row("bm25s: not installed (pip install bm25s) - not measured")]
    start = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([f"{d[2]} {d[3]}" for d in docs], show_progress=False), show_progress=False)
    rate = len(docs) / (time.perf_counter() - start)
    it = iter(queries * (n // len(queries) + 1))

    def one() -> None:
        tokens = bm25s.tokenize([next(it)], show_progress=False)
        retriever.retrieve(tokens, k=10, show_progress=False)

    ms = timed(one, n)
    return [row(f"bm25s {len(docs)} docs: search top 10 (ids only, no snippets)", ms, index_docs_per_s=round(rate))]


def corpus_dir_row(files: int, root: Path) -> dict[str, Any]:
    """The corpus-directory path (`toolfleet browser index DIR`): HTML files read, extracted and indexed."""
    (root / "html").mkdir()
    for i in range(files):
        (root / "html" / f"{i}.html").write_text(TEA.replace("Tea facts", f"Tea facts {i}"))
    summary = update_index(Corpus(root / "html", "corpus://bench/"), SearchIndex(root / "html-index"))
    return row(
        f"index DIR: {files} HTML files (read + extract + index)",
        index_docs_per_s=round(summary.indexed / summary.seconds),
    )


# --- the server ----------------------------------------------------------------------------------


FIND_BATCH = 100
"""Finds timed per open of the 10,000-line page: fewer than the pages a session keeps (`--max-pages`, 200), or
`--n` above it asked for a cursor the stack had dropped."""


async def mcp_ms(session: Any, name: str, args: dict[str, Any]) -> float:
    start = time.perf_counter()
    result = await session.call_tool(name, args)
    elapsed = (time.perf_counter() - start) * 1000
    if result.is_error:
        raise RuntimeError(f"{name} {args}: {result}")
    return elapsed


@contextlib.asynccontextmanager
async def client(kind: str, url: str) -> AsyncIterator[Any]:
    """`sdk`: the `mcp` 2.x client session; `wire`: the lean client (`bench.wire`), as the gateway's calls come."""
    headers = {"x-session-id": uuid.uuid4().hex}
    async with client_session(kind, url, headers) as session:
        yield session


async def server_rows(url: str, web: str, queries: list[str], n: int, kind: str) -> list[dict[str, Any]]:
    rows = []
    via = f"MCP, {kind} client"
    async with client(kind, url) as s:
        ms = []
        for _ in range(n):  # what any call costs on this machine: the client, JSON-RPC and HTTP, no browser work
            start = time.perf_counter()
            await s.call_tool("find", {"pattern": " "})
            ms.append((time.perf_counter() - start) * 1000)
        rows.append(row(f"server: round trip of a refused call ({via})", ms))
        for q in queries[:10]:
            await mcp_ms(s, "search", {"query": q})
        ms = [await mcp_ms(s, "search", {"query": q}) for q in (queries * 2)[:n]]
        rows.append(row(f"server: search round trip (100k-doc index, {via})", ms))
        await mcp_ms(s, "open", {"id": f"{web}/tea"})
        ms = [await mcp_ms(s, "open", {"id": f"{web}/tea"}) for _ in range(n)]
        rows.append(row(f"server: cached open round trip ({via})", ms))
        await mcp_ms(s, "open", {"id": f"{web}/lines/10000"})
        ms = []
        for i in range(n):
            if i % FIND_BATCH == 0:  # each find is a page of its own: reopen before the page leaves the stack
                cursor = (await s.call_tool("open", {"id": f"{web}/lines/10000"})).structured_content["cursor"]
            ms.append(await mcp_ms(s, "find", {"pattern": f"lazy dog {i % 97}\n", "cursor": cursor}))
        rows.append(row(f"server: find on a 10,000-line page ({via})", ms))
    return rows


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


# --- ours vs the reference approach for `open` ---------------------------------------------------


def reference_open(html: str) -> str:
    """gpt-oss simple_browser's way: html2text over the whole page, then wrap and number, on every call."""
    import html2text

    h = html2text.HTML2Text()
    h.body_width = 0
    lines = [w for para in h.handle(html).splitlines() for w in (textwrap.wrap(para, 80) or [""])]
    return "\n".join(f"L{i}: {line}" for i, line in enumerate(lines[:60]))


async def in_process_rows(index_dir: Path, queries: list[str], n: int) -> list[dict[str, Any]]:
    """The browser's own work per call, without the MCP transport: search (engine, page, view) and find."""
    from tools.browser.backends.local import LocalIndex

    settings = BrowserSettings(index_dir=index_dir)
    local = LocalIndex(settings)
    await local.start()
    browser = Browser(settings, local, Fetcher(FetchLimits(), []))
    session = await browser.new_session("bench")
    rows = []
    for q in queries[:10]:
        await browser.search(session, q, 10, None, Options())
    ms = []
    for q in (queries * 2)[:n]:
        start = time.perf_counter()
        cursor = await browser.search(session, q, 10, None, Options())
        session.views[cursor].render(cursor)
        ms.append((time.perf_counter() - start) * 1000)
    rows.append(row(f"in-process search ({index_dir.name}: engine, page, view, render)", ms))
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i % 97}\n" for i in range(10_000))
    from tools.browser.extract import text_document

    session.cache(text_document(text, "https://example.com/lines"), "https://example.com/lines")
    ms = []
    for i in range(n):
        if i % FIND_BATCH == 0:
            page = await browser.open(session, "https://example.com/lines", None, None, None, False, Options())
        start = time.perf_counter()
        cursor = await browser.find(session, f"lazy dog {i % 97}\n", page, Options())
        session.views[cursor].render(cursor)
        ms.append((time.perf_counter() - start) * 1000)
    rows.append(row("in-process find on a 10,000-line page", ms))
    await browser.fetcher.aclose()
    return rows


async def open_ratio_rows(n: int, tmp: Path) -> list[dict[str, Any]]:
    settings = BrowserSettings(index_dir=tmp / "ratio-index")
    browser = Browser(settings, None, Fetcher(FetchLimits(), []))  # type: ignore[arg-type]  # no search here
    session = await browser.new_session("bench")
    url = "https://example.com/tea"
    session.cache(html_document(TEA, url), url)
    await browser.open(session, url, None, None, None, False, Options())  # the first view counts its tokens
    ours = []
    for _ in range(n):
        start = time.perf_counter()
        cursor = await browser.open(session, url, None, None, None, False, Options())
        session.views[cursor].render(cursor)
        ours.append((time.perf_counter() - start) * 1000)
    reference = timed(lambda: reference_open(TEA), n)
    await browser.fetcher.aclose()
    ratio = round(pct(reference, 50) / pct(ours, 50), 1)
    return [
        row("in-process open, ours (cached page, render view)", ours),
        row("in-process open, reference: html2text per call", reference, ours_faster_x=ratio),
    ]


def extraction_rows(n: int) -> list[dict[str, Any]]:
    """HTML to text on one real page: ours (selectolax DOM walk, link markers kept) vs the other extractors."""
    pydoc = Path("/usr/share/doc/python3-doc/html/library/functions.html")
    html, name = (pydoc.read_text(), "python3-doc functions.html") if pydoc.is_file() else (TEA, "the fixture tea page")
    rows = [
        row(f"extract {name}: selectolax walk (ours, with links)", timed(lambda: html_document(html, "https://x/"), n))
    ]
    try:
        import trafilatura

        ms = timed(lambda: trafilatura.extract(html, include_links=True), n)
        rows.append(row(f"extract {name}: trafilatura (main text, links as markdown)", ms))
    except ImportError:
        rows.append(row("extract: trafilatura not installed - not measured"))
    try:
        import html2text

        rows.append(row(f"extract {name}: html2text", timed(lambda: html2text.html2text(html), n)))
    except ImportError:
        rows.append(row("extract: html2text not installed - not measured"))
    return rows


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp_name:
        tmp = Path(tmp_name)
        big_index = None
        for size in sizes:
            docs, queries = documents(size)
            index_dir = tmp / f"index-{size}"
            rows += tantivy_rows(docs, queries, args.n, index_dir)
            rows += bm25s_rows(docs, queries, args.n)
            big_index = index_dir
        rows.append(corpus_dir_row(args.files, tmp))
        corpus = write_corpus(tmp / "small-corpus")
        assert big_index is not None
        with serve_asgi(web_app()) as web:
            flags = browser_args(web, corpus, big_index)
            flags = flags[: flags.index("--corpus-dir")] + flags[flags.index("--index-dir") :]  # the big index as is
            with running_service(flags) as svc:
                for kind in CLIENTS:
                    rows += await server_rows(svc.url, web, queries, args.n, kind)
                rows.append(row("server RSS after the runs", rss_mb=rss_mb(svc.proc.pid)))
        rows += await in_process_rows(big_index, queries, args.n)
        rows += extraction_rows(max(5, args.n // 10))
        rows += await open_ratio_rows(args.n, tmp)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_rows(rows, width=62)
    save(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
