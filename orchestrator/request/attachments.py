"""`input_file` content parts as the text a text-only model reads, and `input_image` parts for models that
take images.

gpt-oss and the chat-template models served here read text only, so a file a message carries is given to
them as its extracted text: plain text and Markdown as they are, HTML through selectolax (the parser the
browser tool uses) without its scripts, styles and markup, PDF through pypdf. The part becomes an
`input_text` part (`[file NAME]` and the text) before anything else reads the input, so a conversation or
a stored response keeps the text, not the file, and the file need not outlive the request. Any other type
is a 400 naming the part, and so is a text over `--max-input-file-chars` (never cut short silently).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.files import Files
from toolkit.extract import Unreadable, decoded, html_text, pdf_text

FIELDS = frozenset({"type", "file_data", "file_id", "filename", "detail"})
"""`detail` is how a vision model renders a file: no effect on extracted text."""
SUFFIXES = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html"}
SUFFIXES |= {".htm": "html", ".pdf": "pdf"}
MEDIA_TYPES = {"text/plain": "text", "text/markdown": "markdown", "text/html": "html", "application/pdf": "pdf"}
DATA_URL = re.compile(r"data:([\w.+/-]*)(?:;[\w=.-]+)*;base64,(.*)", re.DOTALL)


@dataclass(frozen=True)
class Attachment:
    """One `input_file` part's bytes and what it says it is."""

    data: bytes
    filename: str
    media_type: str


@dataclass(frozen=True)
class Limits:
    """`max_chars` of text per file; `max_bytes` of an uploaded file (`file_data` is bounded by the body's)."""

    max_chars: int
    max_bytes: int


async def inline(
    items: list[dict[str, Any]], owner: str, files: Files | None, limits: Limits, param: str = "input"
) -> list[dict[str, Any]]:
    """`items` with each message's `input_file` parts replaced by `input_text` parts of their text (an error names
    the part as `param[i].content[j]`: a response's `input`, a conversation's `items`)."""
    out = []
    for i, item in enumerate(items):
        content = item.get("content")
        if item.get("type") == "message" and isinstance(content, list) and any(_is_file(p) for p in content):
            parts = [
                await _as_text(p, owner, files, limits, f"{param}[{i}].content[{j}]") if _is_file(p) else p
                for j, p in enumerate(content)
            ]
            item = {**item, "content": parts}
        out.append(item)
    return out


def _is_file(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "input_file"


async def _as_text(part: dict[str, Any], owner: str, files: Files | None, limits: Limits, where: str) -> dict:
    if unknown := sorted(set(part) - FIELDS):
        hint = "; send file_data or a file_id" if unknown[0] == "file_url" else ""
        raise RequestError(f"input_file field {unknown[0]!r} is not supported here{hint}", f"{where}.{unknown[0]}")
    found = await _attachment(part, owner, files, limits.max_bytes, where)
    max_chars = limits.max_chars
    kind = _kind(found)
    if kind is None:
        raise RequestError(
            f"input_file {found.filename or '(unnamed)'!r} ({found.media_type or 'unknown type'}) is not text, "
            "markdown, HTML or PDF, which is what this server can give a model as text",
            where,
        )
    try:
        text = await anyio.to_thread.run_sync(_extract, kind, found.data, max_chars)  # pypdf, lexbor: CPU-bound
    except RequestError as exc:  # named as the request has it
        raise RequestError(str(exc), where) from None
    if text is None or len(text) > max_chars:
        raise RequestError(
            f"input_file {found.filename or '(unnamed)'!r} has more than {max_chars} characters of text "
            "(the server's --max-input-file-chars)",
            where,
        )
    return {"type": "input_text", "text": f"[file {found.filename or '(unnamed)'}]\n{text}"}


async def _attachment(part: dict[str, Any], owner: str, files: Files | None, max_bytes: int, where: str) -> Attachment:
    """The part's bytes: its `file_data` (a base64 data URL, or bare base64), or the caller's uploaded file."""
    filename = part.get("filename") if isinstance(part.get("filename"), str) else ""
    if ("file_data" in part) == ("file_id" in part):
        raise RequestError("input_file needs exactly one of file_data and file_id", where)
    if "file_id" in part:
        if files is None or not isinstance(part["file_id"], str):
            raise RequestError("input_file file_id must name an uploaded file", f"{where}.file_id")
        try:
            record = await files.find(part["file_id"], owner)
        except RequestError as exc:  # named as the request has it
            raise RequestError(str(exc), f"{where}.file_id", exc.status, exc.code) from None
        if record.bytes > max_bytes:
            message = f"input_file {record.id} has {record.bytes} bytes; a file given as text may have {max_bytes}"
            raise RequestError(message, f"{where}.file_id")
        data = await anyio.Path(files.path(record.id)).read_bytes()
        return Attachment(data, filename or record.filename, "")
    raw = part["file_data"]
    match = DATA_URL.fullmatch(raw) if isinstance(raw, str) else None
    try:
        data = base64.b64decode(match.group(2) if match else str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("input_file file_data must be base64 (or a base64 data URL)", f"{where}.file_data") from None
    return Attachment(data, filename, match.group(1).lower() if match else "")


def _kind(found: Attachment) -> str | None:
    """text, markdown, html or pdf: by the data URL's media type, else the file name, else PDF's magic."""
    if found.media_type in MEDIA_TYPES:
        return MEDIA_TYPES[found.media_type]
    suffix = "." + found.filename.rpartition(".")[2].lower() if "." in found.filename else ""
    if suffix in SUFFIXES and found.media_type in ("", "application/octet-stream"):
        return SUFFIXES[suffix]
    return "pdf" if found.data.startswith(b"%PDF-") and not found.media_type else None


def _extract(kind: str, data: bytes, max_chars: int) -> str | None:
    """The text of `data`; None: more than `max_chars` (a PDF stops being read once past it)."""
    try:
        if kind == "pdf":
            return pdf_text(data, max_chars)
        text = decoded(data)
    except Unreadable as exc:
        raise RequestError(f"input_file could not be read: {exc}") from None
    return html_text(text) if kind == "html" else text


IMAGE_START, IMAGE_END = "\ue000image:", "\ue001"
"""An `input_image` part inside a user message's text (private-use characters): Harmony messages carry text
only, so the image's URL rides in the text, stored with it, until the chat path makes it an `image_url` part
again (`split_images`). Only a model named in `--vision-models`, served on the chat path, is sent one."""
_IMAGE = re.compile(re.escape(IMAGE_START) + "(.*?)" + re.escape(IMAGE_END), re.DOTALL)


def image_marker(part: dict[str, Any], where: str) -> str:
    """An `input_image` part (`image_url`: a `data:image/` URL) as its marker in the message text. An http(s)
    URL is refused: the worker would fetch it from inside the fleet's network, for whoever sent it."""
    url = part.get("image_url")
    if "file_id" in part or not isinstance(url, str) or not url.startswith("data:image/"):
        raise RequestError(
            "input_image needs image_url as a data:image/ URL (the image's bytes, base64); an http(s) URL is "
            "not fetched here",
            where,
        )
    if IMAGE_END in url:
        raise RequestError("input_image image_url is not a URL", where)
    return f"{IMAGE_START}{url}{IMAGE_END}"


def split_images(text: str) -> str | list[dict[str, Any]]:
    """A user message's text as chat content: the text itself, or text and `image_url` parts in order."""
    if IMAGE_START not in text:
        return text
    parts: list[dict[str, Any]] = []
    for n, piece in enumerate(_IMAGE.split(text)):
        if n % 2:
            parts.append({"type": "image_url", "image_url": {"url": piece}})
        elif piece:
            parts.append({"type": "text", "text": piece})
    return parts


def check_images(items: list[dict[str, Any]], model: str, takes_images: bool) -> None:
    """A 400 naming the model for an `input_image` a model that takes no images would be sent."""
    if takes_images:
        return
    for i, item in enumerate(items):
        content = item.get("content")
        for j, part in enumerate(content if item.get("type") == "message" and isinstance(content, list) else []):
            if isinstance(part, dict) and part.get("type") == "input_image":
                raise RequestError(
                    f"model {model!r} does not take image input (input_image); a model named in the "
                    "orchestrator's --vision-models and served on the chat path does",
                    f"input[{i}].content[{j}]",
                )


def check_history(messages: list[Message], model: str, takes_images: bool, param: str) -> None:
    """A 400 naming the model when the history a response continues (a conversation's items or a previous
    response) holds an image that a model taking no images would be sent."""
    if takes_images:
        return
    if any(m.author.role == h.Role.USER and IMAGE_START in h.text_of(m) for m in messages):
        raise RequestError(
            f"model {model!r} does not take image input, and the history this response continues has an image",
            param,
        )
