"""Streamable HTTP that answers a request with one JSON body when nothing but its result can travel.

The SDK answers every request POST of a 2025-era session with an SSE stream (a response task, a ping task and
event framing), which cost a fifth of a refused call's CPU. The spec lets a server pick JSON or SSE per request
and obliges every client to read both. Our tools send a request nothing but its result unless the caller asked
for progress (`_meta.progressToken`, which the heartbeat of a long call uses): they write no log notifications
and make no requests back to the client. So a request without a progress token, from a client that accepts both
content types, is answered in the SDK's own JSON mode; `initialize` and every request with a token keep SSE.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

_json_answer: ContextVar[bool] = ContextVar("toolfleet_json_answer", default=False)
"""Set for the length of one POST's handling, in that request's task only: the session's message router runs in
a task of its own, so a notification related to a request still finds that request's SSE stream."""


def takes_json_answer(request: Request, body: bytes) -> bool:
    """A single JSON-RPC request (not `initialize`) without a progress token, from a client that accepts JSON
    and SSE alike (one that accepts only one of them gets the SDK's answer, a 406, as before)."""
    has_json, has_sse = check_accept_headers(request)
    if not (has_json and has_sse) or not request.headers.get("content-type", "").startswith("application/json"):
        return False
    try:
        message: Any = json.loads(body)
    except ValueError:
        return False  # the SDK answers the parse error
    if not isinstance(message, dict) or message.get("id") is None or not isinstance(message.get("method"), str):
        return False
    return message["method"] != "initialize" and progress_token_from_params(message.get("params")) is None


class SingleAnswerTransport(StreamableHTTPServerTransport):
    """The SDK's transport with its response mode chosen per request by `takes_json_answer`."""

    @property
    def is_json_response_enabled(self) -> bool:  # type: ignore[override]  # a read-only view of the request's mode
        return _json_answer.get()

    async def _handle_post_request(self, scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        body = await request.body()  # read once here: the SDK reads the same cached bytes
        mode = _json_answer.set(takes_json_answer(request, body))
        try:
            await super()._handle_post_request(scope, request, receive, send)
        finally:
            _json_answer.reset(mode)


class SingleAnswerSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager whose sessions answer through `SingleAnswerTransport`."""

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None:
            # The SDK builds its transport inside this method; the subclass adds behaviour and no state, so the
            # new session's transport takes its class rather than this method being copied.
            transport.__class__ = SingleAnswerTransport
        return transport
