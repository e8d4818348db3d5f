"""The offline corpus: a directory of HTML / Markdown / text files, each with a URL under a base URL.

Documents open from disk with no network (`open` of a corpus URL), and feed the local search index.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from tools.browser.extract import html_document, text_document
from tools.browser.fetch import decode_text
from tools.browser.page import Document

SUFFIXES = {
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".rst": "text",
}
_MARKER = re.compile(r"【\d+†([^†】]*)(?:†[^】]*)?】")


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    rel: str
    mtime_ns: int


class Corpus:
    def __init__(self, root: Path, base_url: str) -> None:
        self.root = root.resolve()
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"

    def files(self) -> Iterator[CorpusFile]:
        """Every document, skipping hidden and `_`-prefixed folders (a Sphinx build's _sources, _static)."""
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root)
            if path.suffix.lower() in SUFFIXES and path.is_file() and not any(p[0] in "._" for p in rel.parts[:-1]):
                yield CorpusFile(path, rel.as_posix(), path.stat().st_mtime_ns)

    def url_of(self, rel: str) -> str:
        return self.base_url + quote(rel)

    def path_of(self, url: str) -> Path | None:
        """The file behind a corpus URL, or None when the URL is not one (or escapes the corpus)."""
        if not url.startswith(self.base_url):
            return None
        rel = unquote(url[len(self.base_url) :].split("#", 1)[0].split("?", 1)[0]) or "index.html"
        path = Path(os.path.normpath(self.root / rel))  # lexical: `..` cannot climb out; the corpus's own links may
        if not path.is_relative_to(self.root) or path.suffix.lower() not in SUFFIXES:
            return None
        return path if path.is_file() else None

    def load(self, path: Path) -> Document:
        """A corpus file as a page (blocking: call it off the event loop)."""
        kind = SUFFIXES[path.suffix.lower()]
        url = self.url_of(path.relative_to(self.root).as_posix())
        text = decode_text(path.read_bytes(), "text/html" if kind == "html" else "text/plain")
        if kind == "html":
            return html_document(text, url)
        return text_document(text, url, markdown=kind == "markdown")


def plain_text(doc: Document) -> str:
    """A page's text for the index: link markers reduced to their text."""
    return _MARKER.sub(r"\1", "\n".join(doc.lines))
