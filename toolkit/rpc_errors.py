"""Every refusal on a tool server's MCP paths is a JSON-RPC error body, whoever wrote it.

The SDK's transport checks answer some refusals as plain text (a wrong `Content-Type`, a body over
the limit, a bad `Host` or `Origin`), and Starlette's routing answers a method `/mcp` does not take
the same way. A client parses JSON-RPC there, so this middleware rewrites any 4xx/5xx answer that is
not JSON into `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": <the text>}}`,
keeping the status and the other headers. JSON answers (the SDK's own JSON-RPC errors) pass as sent.
"""

from __future__ import annotations

import json
from http import HTTPStatus

from mcp.types import INVALID_REQUEST
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _is_json(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


class JsonRpcErrors:
    """Rewrites non-JSON error answers on `paths` (exact paths, or prefixes ending in `/`)."""

    def __init__(self, app: ASGIApp, *, paths: tuple[str, ...]) -> None:
        self.app, self.paths = app, paths

    def _covers(self, path: str) -> bool:
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._covers(scope["path"]):
            return await self.app(scope, receive, send)
        held: Message | None = None  # the start of an answer being rewritten
        body = bytearray()

        async def rewrite(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] >= 400:
                if not _is_json(Headers(raw=message["headers"])):
                    held = message
                    return
            if held is None or message["type"] != "http.response.body":
                return await send(message)
            body.extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            text = body.decode(errors="replace").strip() or HTTPStatus(held["status"]).phrase
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": text}}
            payload = json.dumps(error).encode()
            headers = MutableHeaders(raw=list(held["headers"]))
            headers["content-type"] = "application/json"
            headers["content-length"] = str(len(payload))
            await send({**held, "headers": headers.raw})
            await send({"type": "http.response.body", "body": payload})

        await self.app(scope, receive, rewrite)
