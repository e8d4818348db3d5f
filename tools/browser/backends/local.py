"""The default search backend: BM25 over the corpus with tantivy, snippets from its snippet generator.

The index lives in `--index-dir` and is built or brought up to date from `--corpus-dir` at start-up
(and by `toolfleet browser index DIR`): unchanged files are kept, changed ones replaced, removed
ones deleted. Searches run in a worker thread, so the event loop never waits on the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
import tantivy

from tools.browser.backends import Hit, SearchOptions, SearchUnavailable
from tools.browser.backends.web import in_domains
from tools.browser.corpus import Corpus, plain_text
from tools.browser.settings import BrowserSettings

log = structlog.get_logger(__name__)
SNIPPET_CHARS = 240


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_text_field("url", stored=True, tokenizer_name="raw")
    b.add_text_field("path", stored=True, tokenizer_name="raw")
    b.add_integer_field("mtime", stored=True)
    b.add_text_field("title", stored=True)
    b.add_text_field("body", stored=True)
    return b.build()


@dataclass
class IndexSummary:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    failed: int = 0
    seconds: float = 0.0

    @property
    def indexed(self) -> int:
        return self.added + self.updated

    def line(self) -> str:
        rate = self.indexed / self.seconds if self.seconds else 0.0
        return (
            f"indexed {self.indexed} documents ({self.added} new, {self.updated} changed), {self.removed} removed, "
            f"{self.unchanged} unchanged, {self.failed} unreadable, in {self.seconds:.1f} s ({rate:.0f} docs/s)"
        )


class SearchIndex:
    """A tantivy index of (url, title, body) documents."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(_schema(), path=str(directory), reuse=True)
        self.index.reload()

    def stored(self) -> dict[str, int]:
        """path -> mtime of every indexed file."""
        searcher = self.index.searcher()
        if searcher.num_docs == 0:
            return {}
        result = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs)
        out: dict[str, int] = {}
        for _, address in result.hits:
            doc = searcher.doc(address)
            out[doc["path"][0]] = doc["mtime"][0]
        return out

    def add(self, docs: Iterable[tuple[str, str, str, str, int]]) -> int:
        """Add (url, path, title, body, mtime) documents in one commit; returns how many."""
        writer = self.index.writer(heap_size=128 * 1024 * 1024)
        n = 0
        for url, path, title, body, mtime in docs:
            writer.delete_documents_by_term("path", path)
            writer.add_document(tantivy.Document(url=url, path=path, title=title, body=body, mtime=mtime))
            n += 1
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        return n

    def remove(self, paths: Iterable[str]) -> None:
        writer = self.index.writer(heap_size=32 * 1024 * 1024)
        for path in paths:
            writer.delete_documents_by_term("path", path)
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()

    def search(self, query: str, limit: int) -> list[Hit]:
        parsed, _errors = self.index.parse_query_lenient(query, ["title", "body"], field_boosts={"title": 2.0})
        searcher = self.index.searcher()
        snippets = tantivy.SnippetGenerator.create(searcher, parsed, self.index.schema, "body")
        snippets.set_max_num_chars(SNIPPET_CHARS)
        hits = []
        for _, address in searcher.search(parsed, limit=limit, count=False).hits:
            doc = searcher.doc(address)
            fragment = snippets.snippet_from_doc(doc).fragment() or doc["body"][0][:SNIPPET_CHARS]
            hits.append(Hit(doc["url"][0], doc["title"][0], " ".join(fragment.split())))
        return hits


def update_index(
    corpus: Corpus, index: SearchIndex, progress: Callable[[int, int], None] = lambda done, total: None
) -> IndexSummary:
    """Bring the index up to date with the corpus directory (blocking)."""
    start = time.perf_counter()
    summary = IndexSummary()
    known = index.stored()
    files = list(corpus.files())
    seen = {f.rel for f in files}
    todo = [f for f in files if known.get(f.rel) != f.mtime_ns]
    summary.unchanged = len(files) - len(todo)

    def docs() -> Iterable[tuple[str, str, str, str, int]]:
        for i, f in enumerate(todo, 1):
            try:
                doc = corpus.load(f.path)
            except (OSError, ValueError) as exc:
                log.warning("corpus.unreadable", path=f.rel, error=str(exc))
                summary.failed += 1
                continue
            if f.rel in known:
                summary.updated += 1
            else:
                summary.added += 1
            progress(i, len(todo))
            yield corpus.url_of(f.rel), f.rel, doc.title, plain_text(doc), f.mtime_ns

    index.add(docs())
    gone = [p for p in known if p not in seen]
    if gone:
        index.remove(gone)
    summary.removed = len(gone)
    summary.seconds = time.perf_counter() - start
    return summary


class LocalIndex:
    """The `local` backend: the corpus index, built or updated when the server starts."""

    def __init__(self, settings: BrowserSettings) -> None:
        self.settings = settings
        self.index: SearchIndex | None = None

    async def start(self) -> None:
        self.index = await anyio.to_thread.run_sync(SearchIndex, self.settings.index_dir)
        if self.settings.corpus_dir is not None:
            corpus = Corpus(self.settings.corpus_dir, self.settings.corpus_base_url)
            summary = await anyio.to_thread.run_sync(update_index, corpus, self.index)
            log.info("index.updated", corpus_dir=str(self.settings.corpus_dir), summary=summary.line())

    async def search(self, query: str, topn: int, options: SearchOptions) -> list[Hit]:
        if self.index is None:
            raise SearchUnavailable("the local index is not open (the server is starting or stopping)")
        # Ask for more when filtering by domain, so topn survive the filter.
        limit = topn * 5 if options.allowed_domains else topn
        try:
            hits = await anyio.to_thread.run_sync(self.index.search, query, limit)
        except (ValueError, OSError) as exc:  # tantivy reports its faults as ValueError
            raise SearchUnavailable(f"the local index failed: {exc}") from exc
        return [h for h in hits if in_domains(h.url, options.allowed_domains)][:topn]

    async def aclose(self) -> None:
        self.index = None
