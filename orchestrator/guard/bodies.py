"""Request bodies bounded as they arrive: one limit per route, enforced before the app reads a byte.

Every route used to read its whole body before looking at its size (or never looked), so a client could
make the orchestrator hold any amount of memory. `BodyLimitMiddleware` sits in front of every route:
a `Content-Length` over the route's limit is refused at once (413) without reading the body, and a body
without one (chunked) is counted as it streams and refused as soon as the count passes the limit. The
limits (`BodyLimits`, from `--max-body-bytes` and `--max-file-bytes`) are documented per route in the
README; WebSocket messages are bounded in `api/websocket.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.errors import RequestError, error_body

UPLOAD_ROUTES = re.compile(r"/v1/files|/v1/containers/[^/]+/files")
"""The multipart uploads, bounded by `--max-file-bytes` (plus the form around the file) instead."""
FORM_OVERHEAD = 256 * 1024
"""Room for an upload's form fields and part headers beside the file itself (`files.FIELD_LIMIT` each)."""
CONTAINER_JSON = 1 << 20
"""`POST /v1/containers`: a name, a few file ids and a memory limit."""


class BodyTooLarge(RequestError):
    """A body over its route's limit: 413, raised while it streams in (the route sees it as a read error)."""

    def __init__(self, limit: int, param: str | None) -> None:
        super().__init__(f"the request body is larger than this route's limit of {limit} bytes", param, 413)
        self.code = "request_too_large"


@dataclass(frozen=True)
class BodyLimits:
    """The largest body each route takes (the README's table): uploads their file limit plus the form,
    container creation 1 MiB, every other route `--max-body-bytes`."""

    json_bytes: int
    upload_bytes: int

    def for_route(self, method: str, path: str) -> tuple[int, str | None]:
        """The route's limit, and the parameter a 413 names (`file` for an upload)."""
        if method == "POST" and UPLOAD_ROUTES.fullmatch(path):
            return self.upload_bytes + FORM_OVERHEAD, "file"
        if method == "POST" and path == "/v1/containers":
            return min(self.json_bytes, CONTAINER_JSON), None
        return self.json_bytes, None


def _declared(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return value.decode("latin-1").strip()
    return None


class BodyLimitMiddleware:
    """Pure ASGI: refuses a declared size over the route's limit before reading, and stops a streamed body
    as soon as it passes it. The route reading the body gets `BodyTooLarge` from `receive`; whatever it
    makes of it (FastAPI's own body parsing turns any read error into a 400), the answer is the 413."""

    def __init__(self, app: ASGIApp, *, limits: BodyLimits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit, param = self.limits.for_route(scope["method"], scope["path"])
        declared = _declared(scope)
        if declared is not None and not declared.isdigit():
            return await _refuse(RequestError("Content-Length is not a number of bytes"), scope, receive, send)
        if declared is not None and int(declared) > limit:
            return await _refuse(BodyTooLarge(limit, param), scope, receive, send)
        received = 0
        started = False
        over: BodyTooLarge | None = None

        async def counted() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = BodyTooLarge(limit, param)
                    raise over
            return message

        async def answer(message: Message) -> None:
            """The app's answer, or once the body passed the limit the 413 in place of whatever it answers."""
            nonlocal started
            if over is not None and not started:
                started = True
                await _refuse(over, scope, receive, send)
            elif over is None:
                started = started or message["type"] == "http.response.start"
                await send(message)

        try:
            await self.app(scope, counted, answer)
        except BodyTooLarge:
            if started:
                raise
            await answer({"type": "http.response.start"})


async def _refuse(exc: RequestError, scope: Scope, receive: Receive, send: Send) -> None:
    body = error_body(str(exc), exc.etype, exc.param, exc.code)
    await JSONResponse(body, exc.status, headers={"connection": "close"})(scope, receive, send)
