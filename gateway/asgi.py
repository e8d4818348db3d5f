"""Small raw-ASGI helpers: the hot path skips framework request objects."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import Receive, Scope, Send

from gateway.errors import BodyTooLarge, InvalidRequest, error_body
from toolkit.wire import SESSION_HEADER

_SESSION_ID = re.compile(r"^[\x21-\x7e]{1,256}$")
_SESSION = SESSION_HEADER.encode()


def header(scope: Scope, name: bytes) -> str | None:
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def session_header(scope: Scope) -> str | None:
    xsid = header(scope, _SESSION)
    if xsid is not None and not _SESSION_ID.match(xsid):
        raise InvalidRequest("x-session-id must be 1-256 visible ASCII characters")
    return xsid


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    length = header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise BodyTooLarge(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("client went away before sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_bytes(
    send: Send, status: int, body: bytes, content_type: bytes = b"application/json", extra: list[Any] | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, obj: Any, extra: list[Any] | None = None) -> None:
    await send_bytes(send, status, json.dumps(obj).encode(), extra=extra)


async def send_error(send: Send, request_id: Any, exc: BaseException, extra: list[Any] | None = None) -> int:
    status, body = error_body(request_id, exc)
    await send_bytes(send, status, body, extra=extra)
    return status
