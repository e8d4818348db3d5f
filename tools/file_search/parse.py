"""Text out of an uploaded file: plain text and Markdown as they are, HTML through the browser's extractor,
PDF through pypdf. Anything else, or a file that does not parse, is refused with its reason."""

from __future__ import annotations

import io
import re
from pathlib import PurePosixPath

from charset_normalizer import from_bytes
from pypdf import PdfReader
from pypdf.errors import PyPdfError

from tools.browser.extract import html_document

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".py", ".log"}
HTML_SUFFIXES = {".html", ".htm"}
LINK = re.compile(r"【\d+†([^†】]*)(?:†[^】]*)?】")
"""The browser's link marker (`【3†text†host】`, for the model to follow): an index keeps the link's text."""


class UnparsableFile(ValueError):
    """A file whose text could not be read: the reason is the message."""


def extract_text(filename: str, data: bytes) -> str:
    """The text of `data`, by the file name's suffix (as OpenAI's file types go)."""
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix == ".pdf":
        text = _pdf(data)
    elif suffix in HTML_SUFFIXES:
        document = html_document(_decode(data), None)
        text = LINK.sub(r"\1", "\n".join(document.lines))
    elif suffix in TEXT_SUFFIXES:
        text = _decode(data)
    else:
        known = ", ".join(sorted(TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}))
        raise UnparsableFile(f"unsupported file type {suffix or '(no suffix)'!r}; supported: {known}")
    if not text.strip():
        raise UnparsableFile("the file has no text to index")
    return text


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        best = from_bytes(data).best()
        if best is None:
            raise UnparsableFile("the file is not text in any encoding recognised") from None
        return str(best)


def _pdf(data: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise UnparsableFile(f"the PDF could not be read: {exc}") from exc
