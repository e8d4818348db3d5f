"""The browser itself, with no protocol in it: a session's page stack and search / open / find.

Every call pushes one page view on the caller's stack and names it by a new cursor. Documents a
session opened are cached (LRU), so scrolling and re-opening never fetch again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import structlog

from tools.browser.backends import Hit, SearchBackend, SearchOptions, SearchUnavailable
from tools.browser.backends.web import in_domains
from tools.browser.corpus import Corpus
from tools.browser.extract import html_document, text_document
from tools.browser.fetch import Fetcher, FetchError
from tools.browser.page import Document, Link, View, find_lines, link_marker, wrap, wrap_verbatim
from tools.browser.settings import NO_CORPUS_HINT, BrowserSettings

log = structlog.get_logger(__name__)
CONTEXT_SCALE = {"low": 0.5, "medium": 1.0, "high": 2.0}
MAX_FIND_HITS = 50
FIND_CONTEXT_LINES = 4


class BrowserError(Exception):
    """The model's call cannot be done as asked; the message says what to do instead."""


@dataclass(frozen=True)
class Options:
    """What the request allows (the x-browser-* headers): domains, web access, view size, location."""

    allowed_domains: tuple[str, ...] = ()
    external: bool = True
    context_size: str = "medium"
    user_location: dict[str, Any] = field(default_factory=dict)


@dataclass
class Session:
    max_pages: int
    cache_size: int
    views: dict[int, View] = field(default_factory=dict)
    next_cursor: int = 0
    docs: OrderedDict[str, Document] = field(default_factory=OrderedDict)

    def push(self, view: View) -> int:
        cursor = self.next_cursor
        self.next_cursor += 1
        self.views[cursor] = view
        while len(self.views) > self.max_pages:
            self.views.pop(min(self.views))
        return cursor

    def view(self, cursor: int | None) -> View:
        if not self.views:
            raise BrowserError("no page is open yet: search or open a URL first")
        if cursor is None or cursor < 0:
            return self.views[max(self.views)]
        if cursor not in self.views:
            known = f"{min(self.views)}-{max(self.views)}"
            raise BrowserError(f"there is no page at cursor {cursor} (open cursors: {known})")
        return self.views[cursor]

    def cache(self, doc: Document, *urls: str) -> None:
        for url in urls:
            self.docs[url] = doc
            self.docs.move_to_end(url)
        while len(self.docs) > self.cache_size:
            self.docs.popitem(last=False)

    async def aclose(self) -> None:
        self.views.clear()
        self.docs.clear()


class Browser:
    def __init__(
        self,
        settings: BrowserSettings,
        search: SearchBackend,
        fetcher: Fetcher,
        *,
        corpus: Corpus | None = None,
        corpus_search: SearchBackend | None = None,
    ) -> None:
        self.settings = settings
        self.search_backend = search
        self.corpus_search = corpus_search  # answers searches when external access is off
        self.fetcher = fetcher
        self.corpus = corpus

    async def __aenter__(self) -> Browser:
        await self.search_backend.start()
        if self.corpus_search is not None and self.corpus_search is not self.search_backend:
            await self.corpus_search.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.search_backend.aclose()
            if self.corpus_search is not None and self.corpus_search is not self.search_backend:
                await self.corpus_search.aclose()
            await self.fetcher.aclose()

    async def new_session(self, key: str) -> Session:
        return Session(max_pages=self.settings.max_pages, cache_size=self.settings.page_cache)

    # --- search ----------------------------------------------------------------------------------

    async def search(self, s: Session, query: str, topn: int, source: str | None, opt: Options) -> int:
        query = " ".join(query.split())
        if not query:
            raise BrowserError("the search query is empty")
        if source not in (None, "", "web"):
            raise BrowserError(f"unknown source {source!r}: the only source is `web`")
        if topn < 1:
            raise BrowserError("topn must be at least 1")
        backend = self.search_backend if opt.external else self.corpus_search
        if backend is None:
            raise BrowserError("web access is off for this request and this server has no local corpus to search")
        options = SearchOptions(opt.allowed_domains, opt.user_location)
        try:
            hits = await backend.search(query, min(topn, self.settings.max_topn), options)
        except SearchUnavailable as exc:
            log.warning("search.unavailable", reason=str(exc))
            raise BrowserError(f"search failed: {exc}; try again later") from exc
        page = search_page(query, hits)
        if not hits and self.corpus is None and backend is self.corpus_search:
            page.lines += wrap(NO_CORPUS_HINT)
        return s.push(self._view(s, page, 0, None, opt))

    # --- open ------------------------------------------------------------------------------------

    async def open(
        self,
        s: Session,
        target: int | str | None,
        cursor: int | None,
        loc: int | None,
        num_lines: int | None,
        view_source: bool,
        opt: Options,
    ) -> int:
        if num_lines is not None and num_lines < 1:
            raise BrowserError("num_lines must be at least 1")
        if isinstance(target, str):
            doc, start = await self._load(s, target, opt), loc
        elif target is not None:
            page = s.view(cursor).doc
            if target not in page.links:
                raise BrowserError(_no_link(target, page))
            link = page.links[target]
            doc = await self._load(s, link.url, opt)
            start = loc if loc is not None else link.loc
        else:
            current = s.view(cursor)
            doc = current.doc
            if loc is None and not view_source:
                if current.end >= len(doc.lines) - 1:
                    raise BrowserError("this view already reaches the end of the page; give `loc` to jump back")
                loc = current.end + 1
            start = loc
        if view_source:
            doc = source_page(doc)
        return s.push(self._view(s, doc, start or 0, num_lines, opt))

    async def _load(self, s: Session, url: str, opt: Options) -> Document:
        url = url.strip()
        if not urlsplit(url).scheme:
            raise BrowserError(f"{url!r} is not a full URL: give an http(s) URL, or a link number from a page")
        if not in_domains(url, opt.allowed_domains):
            raise BrowserError(f"{url} is outside the domains this request allows ({', '.join(opt.allowed_domains)})")
        if (doc := s.docs.get(url)) is not None and in_domains(doc.url or url, opt.allowed_domains):
            s.docs.move_to_end(url)  # a page another call reached by a redirect outside these domains is not shown
            return doc
        if self.corpus is not None and (path := self.corpus.path_of(url)) is not None:
            doc = await anyio.to_thread.run_sync(self.corpus.load, path)
        elif not opt.external:
            raise BrowserError(f"web access is off for this request: only corpus pages open, not {url}")
        else:
            try:
                fetched = await self.fetcher.fetch(url, opt.allowed_domains)
            except FetchError as exc:
                raise BrowserError(str(exc)) from exc
            doc = await anyio.to_thread.run_sync(_parse, fetched.text, fetched.url, fetched.content_type)
            s.cache(doc, fetched.url)
        s.cache(doc, url)
        return doc

    # --- find ------------------------------------------------------------------------------------

    async def find(self, s: Session, pattern: str, cursor: int | None, opt: Options) -> int:
        if not pattern.strip():
            raise BrowserError("the find pattern is empty (or only spaces)")
        if len(pattern) > self.settings.max_pattern_chars:
            raise BrowserError(f"the pattern is longer than {self.settings.max_pattern_chars} characters")
        doc = s.view(cursor).doc
        if doc.hits is not None:
            raise BrowserError("find searches opened pages, not search results: open a result first")
        doc = doc.origin or doc
        matches = await anyio.to_thread.run_sync(find_lines, doc, pattern)
        if not matches:
            raise BrowserError(f"no match for `{pattern}` in {doc.title}")
        return s.push(self._view(s, find_page(pattern, doc, matches), 0, None, opt))

    # --- views -----------------------------------------------------------------------------------

    def _view(self, s: Session, doc: Document, loc: int, num_lines: int | None, opt: Options) -> View:
        last = len(doc.lines) - 1
        if loc < 0 or loc > last:
            raise BrowserError(f"loc {loc} is outside the page (lines 0 - {last})")
        tokens = int(self.settings.view_tokens * CONTEXT_SCALE.get(opt.context_size, 1.0))
        end = doc.view_end(loc, num_lines=num_lines, max_tokens=tokens, max_lines=self.settings.max_num_lines)
        return View(doc, loc, end)


def _parse(text: str, url: str, content_type: str) -> Document:
    if "html" in content_type or content_type.endswith("xml"):
        return html_document(text, url)
    return text_document(text, url, markdown="markdown" in content_type)


def _no_link(link_id: int, page: Document) -> str:
    if not page.links:
        return f"link {link_id} does not exist: this page has no links"
    return f"link {link_id} does not exist: this page has links 0 - {max(page.links)}"


def search_page(query: str, hits: list[Hit]) -> Document:
    """Search results as a page: each hit a link line and its snippet (the hits keep their line ranges)."""
    lines: list[str] = []
    links: dict[int, Link] = {}
    out: list[dict] = []
    for i, hit in enumerate(hits):
        first = len(lines)
        links[i] = Link(hit.url)
        lines += wrap("* " + link_marker(i, hit.title or hit.url, hit.url, None))
        lines += wrap(hit.snippet) if hit.snippet else []
        out.append({"url": hit.url, "title": hit.title, "snippet": hit.snippet, "lines": [first, len(lines) - 1]})
        lines.append("")
    if not hits:
        lines = [f"No results for `{query}`."]
    elif lines[-1] == "":
        lines.pop()
    return Document(url=None, title=query, lines=lines, links=links, hits=out)


def find_page(pattern: str, doc: Document, matches: list[tuple[int, int]]) -> Document:
    """Each match as a link to its line of the page, followed by the lines it spans."""
    lines: list[str] = []
    links: dict[int, Link] = {}
    for i, (first, last) in enumerate(matches[:MAX_FIND_HITS]):
        links[i] = Link(doc.url or "", loc=first)
        lines.append(f"【{i}†match at L{first}】")
        lines += doc.lines[first : min(last, first + FIND_CONTEXT_LINES - 1) + 1]
        lines.append("")
    if len(matches) > MAX_FIND_HITS:
        lines.append(f"({len(matches) - MAX_FIND_HITS} more matches not shown)")
    elif lines:
        lines.pop()
    title = f"Find results for text: `{pattern}` in `{doc.title}`"
    return Document(url=doc.url, title=title, lines=lines, links=links, origin=doc, pattern=pattern)


def source_page(doc: Document) -> Document:
    """The raw source of a page, cut at 80 columns (view_source)."""
    base = doc.origin or doc
    return Document(url=base.url, title=f"Source of {base.title}", lines=wrap_verbatim(base.source), origin=base)
