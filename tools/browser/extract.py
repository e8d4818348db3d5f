"""HTML, Markdown and plain text to a `Document`: readable lines with links as numbered markers.

HTML goes through selectolax (the lexbor engine): one DOM walk writes block structure as line
breaks, links as `【id†text†domain】` markers (their targets kept in the document's link map),
images as `[Image N: alt]`, and drops scripts, styles and navigation chrome.
"""

from __future__ import annotations

import re
from urllib.parse import urldefrag, urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser, LexborNode

from tools.browser.page import Document, Link, escape_text, link_marker, wrap

SKIP = frozenset(
    "script style noscript template svg head iframe object canvas button select form input textarea".split()
)
"""Elements whose text is not the page's: scripts, styles, embedded objects and form controls."""
BLOCK = frozenset(
    "p div section article main header footer aside nav ul ol dl dt dd table tr blockquote "
    "figure figcaption br hr h1 h2 h3 h4 h5 h6 li pre address details summary".split()
)
TIGHT = frozenset({"li", "tr", "br", "dt", "dd", "summary"})
_PARA = "\x00"
_SPACES = re.compile(r"[ \t\r\f\v]+")


def join_url(base: str | None, href: str) -> str:
    """`urljoin`, also for corpus URLs (urljoin leaves schemes it does not know unjoined)."""
    if not base or urlsplit(href).scheme:
        return href if not base else urljoin(base, href)
    scheme = urlsplit(base).scheme
    if scheme in ("http", "https"):
        return urljoin(base, href)
    joined = urljoin("http" + base[len(scheme) :], href)
    return scheme + joined[len("http") :]


class _Writer:
    def __init__(self, base_url: str | None) -> None:
        self.base = base_url
        self.host = urlsplit(base_url).hostname if base_url else None
        self.out: list[str] = []
        self.links: dict[int, Link] = {}
        self.images = 0

    def text(self, s: str) -> None:
        self.out.append(_SPACES.sub(" ", escape_text(s).replace("\n", " ")))

    def newline(self, tight: bool = False) -> None:
        """A line break; outside lists and tables also a blank line, so paragraphs stay apart."""
        self.out.append("\n" if tight else _PARA)

    def link(self, href: str, label: str) -> None:
        url = urldefrag(join_url(self.base, href.strip()))[0]
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https") and scheme != urlsplit(self.base or "").scheme:
            self.text(label)  # mailto:, javascript: and the like are not pages
            return
        link_id = len(self.links)
        self.links[link_id] = Link(url)
        self.out.append(link_marker(link_id, label or url, url, self.host))

    def walk(self, node: LexborNode) -> None:
        child = node.child
        while child is not None:
            self.node(child)
            child = child.next

    def node(self, node: LexborNode) -> None:
        tag = node.tag
        if tag == "-text":
            self.text(node.text_content or "")
            return
        if tag in SKIP or tag in ("-comment", "!doctype") or not tag:
            return
        if tag == "a" and node.attributes.get("href"):
            self.link(node.attributes["href"] or "", (node.text(separator=" ") or "").strip())
            return
        if tag == "img":
            self.images += 1
            self.text(f"[Image {self.images}: {(node.attributes.get('alt') or '').strip()}]")
            return
        if tag == "pre":
            self.newline()
            for line in (node.text() or "").splitlines():
                self.out.append("    " + escape_text(line) + "\n")
            return
        block, tight = tag in BLOCK, tag in TIGHT
        if block:
            self.newline(tight)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.out.append("* ")
        self.walk(node)
        if block:
            self.newline(tight)
        elif tag in ("td", "th"):
            self.out.append(" | ")


def _lines(chunks: list[str]) -> list[str]:
    """Join the walker's chunks: paragraphs apart by one blank line, `pre` lines kept, the rest wrapped."""
    out: list[str] = []
    for para in re.split(r"[\n\x00]*\x00[\n\x00]*", "".join(chunks)):
        lines: list[str] = []
        for line in para.split("\n"):
            if line.startswith("    ") and line.strip():
                lines.append(line.rstrip())
            elif line.strip():
                lines += wrap(_SPACES.sub(" ", line).strip())
        if lines:
            out += [*lines, ""]
    return out[:-1] or [""]


def html_document(html: str, url: str | None) -> Document:
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = escape_text(" ".join((title_node.text() if title_node else "").split()))
    writer = _Writer(url)
    root = tree.body or tree.root
    if root is not None:
        writer.walk(root)
    if not title and (h1 := tree.css_first("h1")) is not None:
        title = escape_text(" ".join(h1.text().split()))
    return Document(
        url=url, title=title or (url or "untitled"), lines=_lines(writer.out), links=writer.links, source=html
    )


def text_document(text: str, url: str | None, *, markdown: bool = False) -> Document:
    """Plain text and Markdown are shown as written (wrapped); Markdown's first heading is its title."""
    title = ""
    if markdown:
        heading = re.search(r"^#\s+(.+)$", text, re.M)
        title = heading.group(1).strip() if heading else ""
    if not title:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        title = first[:80].strip() if not markdown else (url or "untitled")
    paragraphs = re.split(r"\n\s*\n", escape_text(text))
    return Document(url=url, title=title or (url or "untitled"), lines=_lines([_PARA.join(paragraphs)]), source=text)
