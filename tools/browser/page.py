"""Pages as the model sees them: wrapped numbered lines, link markers, token-sized views, find.

A `Document` is what a URL (or a search, or a find) produced: its title, its text already wrapped
at 80 columns, and its numbered links. A `View` is one entry of a session's page stack: a document
and the line range shown. Rendering follows the display format gpt-oss was trained on.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from toolkit.vocab import o200k

WIDTH = 80
LINK_OPEN, LINK_CLOSE, LINK_SEP = "【", "】", "†"
WORDS_CACHED = 1 << 15
"""Words whose token counts are kept: a few MiB at most, as a page line is at most 80 characters."""


def count_tokens(text: str) -> int:
    """o200k tokens of `text`: the vocabulary gpt-oss reads (toolkit.vocab provides it offline).

    Every view counts its lines, and the tokenizer's cost is its pre-tokenizing regex, about 0.1 us a
    character whatever the words: a search page's ~40 lines took a third of an in-process search. Most
    lines are words joined by single spaces (a wrap made them), and o200k's regex never joins a space to
    the character before it nor looks past a word, so such a line's tokens are its first word's plus
    each other word's with its leading space. Words repeat, so those counts are cached; any other text
    (tabs, runs of spaces, newlines) is counted whole."""
    words = text.split()
    if " ".join(words) != text:
        return len(o200k().encode_ordinary(text))
    if not words:
        return 0
    return _word_tokens(words[0]) + sum(map(_spaced_word_tokens, words[1:]))


@functools.lru_cache(maxsize=WORDS_CACHED)
def _word_tokens(word: str) -> int:
    return len(o200k().encode_ordinary(word))


@functools.lru_cache(maxsize=WORDS_CACHED)
def _spaced_word_tokens(word: str) -> int:
    """The tokens of `word` where a space comes before it, counted with that space."""
    return len(o200k().encode_ordinary(" " + word))


@dataclass(frozen=True)
class Link:
    """Where link `id` of a page leads: a URL, and for a find result the line of its source page."""

    url: str
    loc: int | None = None


@dataclass
class Document:
    url: str | None
    title: str
    lines: list[str]
    links: dict[int, Link] = field(default_factory=dict)
    source: str = ""  # the raw body, for view_source
    origin: Document | None = None  # the page a find result (or a source view) came from
    hits: list[dict] | None = None  # a search page's hits: url, title, snippet, lines
    pattern: str | None = None  # a find page's pattern
    _tokens: dict[int, int] = field(default_factory=dict, repr=False)
    _haystack: tuple[str, list[int]] | None = field(default=None, repr=False)

    def haystack(self) -> tuple[str, list[int]]:
        """The page's text normalized for find (one space between words, casefolded), lines joined by
        single spaces, and where each line starts in it; built once per page."""
        if self._haystack is None:
            starts, parts, offset = [], [], 0
            for line in self.lines:
                norm = _normalize(line)
                starts.append(offset)
                parts.append(norm)
                offset += len(norm) + 1
            self._haystack = (" ".join(parts), starts)
        return self._haystack

    def line_tokens(self, i: int) -> int:
        if (n := self._tokens.get(i)) is None:
            n = self._tokens[i] = count_tokens(self.lines[i]) + 3  # + the `L{i}: ` prefix and newline
        return n

    def view_end(self, loc: int, *, num_lines: int | None, max_tokens: int, max_lines: int) -> int:
        """The last line shown from `loc`: `num_lines` lines (capped), else as many as fit in `max_tokens`."""
        last = len(self.lines) - 1
        if num_lines is not None:
            return min(last, loc + min(num_lines, max_lines) - 1)
        end, used = loc, self.line_tokens(loc)
        while end < last and end - loc + 1 < max_lines and used + self.line_tokens(end + 1) <= max_tokens:
            end += 1
            used += self.line_tokens(end)
        return end


@dataclass(frozen=True)
class View:
    """One entry of a session's page stack."""

    doc: Document
    start: int
    end: int

    def render(self, cursor: int) -> str:
        doc = self.doc
        header = f"[{cursor}] {doc.title}" + (f" ({doc.url})" if doc.url else "")
        body = "\n".join(f"L{i}: {doc.lines[i]}" for i in range(self.start, self.end + 1))
        return f"{header}\n**viewing lines [{self.start} - {self.end}] of {len(doc.lines) - 1}**\n\n{body}"

    def structured(self, cursor: int) -> dict:
        """The `structuredContent` of this view (DESIGN: browser results carry structure)."""
        doc = self.doc
        url, title = (doc.origin.url, doc.origin.title) if doc.origin else (doc.url, doc.title)
        out: dict = {
            "cursor": cursor,
            "url": url,
            "title": title,
            "lines": [self.start, self.end],
            "total_lines": len(doc.lines),
        }
        if doc.hits is not None:
            out["hits"] = doc.hits
        if doc.pattern is not None:
            out["pattern"] = doc.pattern
        return out


def escape_text(text: str) -> str:
    """Literal lenticular brackets in page text would read as links: show them as `〖〗`."""
    return text.replace(LINK_OPEN, "〖").replace(LINK_CLOSE, "〗")


def link_marker(link_id: int, text: str, url: str, page_host: str | None) -> str:
    """`【id†text】` for a link on the same site, `【id†text†domain】` for another site."""
    text = escape_text(" ".join(text.split())).replace(LINK_SEP, "‡")
    host = urlsplit(url).hostname
    if host and host != page_host:
        return f"{LINK_OPEN}{link_id}{LINK_SEP}{text}{LINK_SEP}{host.removeprefix('www.')}{LINK_CLOSE}"
    return f"{LINK_OPEN}{link_id}{LINK_SEP}{text}{LINK_CLOSE}"


def _fill(para: str) -> list[str]:
    """One paragraph cut greedily at spaces into lines of at most 80 columns (a longer word is cut).

    Plain greedy filling, several times faster than textwrap, which every page and search pays for. With
    the words joined by single spaces, a line ends at the last space within 81 columns: one search of the
    text per line, not a step per word."""
    if len(para) <= WIDTH:
        return [para.strip()]
    text = " ".join(para.split())
    out: list[str] = []
    start = 0
    while len(text) - start > WIDTH:
        cut = text.rfind(" ", start, start + WIDTH + 1)
        if cut < 0:  # a word longer than a line: its first 80 characters, and its rest starts the next line
            out.append(text[start : start + WIDTH])
            start += WIDTH
            if text[start] == " ":  # the word was a whole number of lines long
                start += 1
        else:
            out.append(text[start:cut])
            start = cut + 1
    if start < len(text):
        out.append(text[start:])
    return out


def wrap(text: str) -> list[str]:
    """Paragraphs wrapped at 80 columns; blank lines kept (once), so the page keeps its shape."""
    out: list[str] = []
    for para in text.split("\n"):
        if not para.strip():
            if out and out[-1] != "":
                out.append("")
            continue
        out += _fill(para) or [""]
    while out and out[-1] == "":
        out.pop()
    return out or [""]


def wrap_verbatim(text: str) -> list[str]:
    """Source text cut at 80 columns with nothing dropped (view_source)."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        out += [line[i : i + WIDTH] for i in range(0, len(line), WIDTH)] or [""]
    return out


def _normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


def find_lines(doc: Document, pattern: str) -> list[tuple[int, int]]:
    """(first, last) line of each match of `pattern`, case-insensitive, matching across the line wraps.

    The wrap broke lines at whitespace, so searching the lines joined by single spaces finds a phrase
    the wrap cut; each match maps back to the lines it spans."""
    hay, starts = doc.haystack()
    found: list[tuple[int, int]] = []
    for m in re.finditer(re.escape(_normalize(pattern)), hay):
        first = bisect.bisect_right(starts, m.start()) - 1
        if not found or found[-1][0] != first:
            found.append((first, bisect.bisect_right(starts, m.end() - 1) - 1))
    return found
