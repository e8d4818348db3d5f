"""Text out of a client's document bytes, for every service that reads a file as text (an `input_file` part, a file
added to a vector store): one text decoder, one PDF reader, one HTML reader, so both say the same of the same file.
CPU-bound: callers run these in a worker thread. What cannot be read is `Unreadable`, its reason the message.
The readers are imported when first used: every orchestrator imports this module, few requests carry a file, and
pypdf alone costs 80 ms at start-up and a larger heap for every full garbage collection to scan."""

from __future__ import annotations

import io
import re

SKIPPED_TAGS = ["script", "style", "noscript", "template", "svg", "head"]
"""HTML elements whose content is not the document's text."""
BLOCKS = "p, div, br, li, dt, dd, h1, h2, h3, h4, h5, h6, tr, pre, blockquote, section, article, header, footer, table"
"""HTML elements that end a line of text."""


class Unreadable(ValueError):
    """Bytes whose text could not be read: the reason is the message."""


def decoded(data: bytes) -> str:
    """UTF-8, else the encoding charset-normalizer finds most likely."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        from charset_normalizer import from_bytes

        best = from_bytes(data).best()
        if best is None:
            raise Unreadable("the file is not text in any encoding recognised") from None
        return str(best)


def html_text(html: str) -> str:
    """The visible text of an HTML document: a line per block element, inline markup (`<b>`, `<a>`) kept inside its
    line, runs of blank lines collapsed."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    tree.strip_tags(SKIPPED_TAGS)
    for block in tree.css(BLOCKS):
        block.insert_after("\n")
    root = tree.body or tree.root
    text = root.text(separator="") if root is not None else ""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def pdf_text(data: bytes, max_chars: int | None = None) -> str | None:
    """The PDF's text, page by page; None once past `max_chars` (the rest is not read)."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Unreadable("it is an encrypted PDF; send one without a password")
        pages: list[str] = []
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            if max_chars is not None and sum(map(len, pages)) > max_chars:
                return None
    except Unreadable:
        raise
    except Exception as exc:  # pypdf raises its own errors and, on a damaged file, builtin ones too
        raise Unreadable(f"the PDF could not be read ({type(exc).__name__})") from None
    return "\n\n".join(p.strip() for p in pages).strip()
