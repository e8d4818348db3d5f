"""Text out of an uploaded file, by its name's suffix: plain text and Markdown as they are, HTML and PDF through the
fleet's one reader of each (`toolkit.extract`). Anything else, or a file that does not parse, is refused with its
reason."""

from __future__ import annotations

from pathlib import PurePosixPath

from toolkit.extract import Unreadable, decoded, html_text, pdf_text

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".py", ".log"}
HTML_SUFFIXES = {".html", ".htm"}


class UnparsableFile(ValueError):
    """A file whose text could not be read: the reason is the message."""


def extract_text(filename: str, data: bytes, max_chars: int) -> str:
    """The text of `data`, by the file name's suffix (as OpenAI's file types go); more than `max_chars` of it is
    refused (a PDF is read no further)."""
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix not in TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}:
        known = ", ".join(sorted(TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}))
        raise UnparsableFile(f"unsupported file type {suffix or '(no suffix)'!r}; supported: {known}")
    try:
        text = pdf_text(data, max_chars) if suffix == ".pdf" else decoded(data)
    except Unreadable as exc:
        raise UnparsableFile(str(exc)) from None
    if text is None or len(text) > max_chars:
        raise UnparsableFile(f"the file's text passes {max_chars} characters (the tool's --max-text-chars)")
    text = html_text(text or "") if suffix in HTML_SUFFIXES else text or ""
    if not text.strip():
        raise UnparsableFile("the file has no text to index")
    return text
