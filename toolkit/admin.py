"""A tool server's operator routes, for the gateway's admin API and the console's Sessions page:

- `GET /admin/sessions?after=KEY&limit=N`: the sessions this replica holds, by key, a page at a time (`next`
  is the `after` of the following page): owner (the key's fleet name, never a secret), how the session is named,
  idle time and age, memory where the sandbox's memory is sampled (absent, not 0, elsewhere), and where
  snapshots are on, when the last background snapshot was taken;
- `POST /admin/sessions/end` with `{"session": KEY}`: the same end as `cleanup_session` (sandbox closed,
  snapshot forgotten).

Both need the fleet's admin bearer token (`toolkit.wire.admin_token`): only a service holding the fleet secret
(the gateway) gets in, never a client of the tools.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolkit.callers import Callers
from toolkit.handles import Handles
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sessions import Held, SessionRegistry
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.wire import admin_token

log = structlog.get_logger(__name__)
MAX_PAGE = 1000


class Operated(Protocol):
    """What the routes read of a `ToolServer`."""

    namespace: str
    sessions: SessionRegistry[Any]
    runtime: ContainerRuntime | None
    keeper: SnapshotKeeper | None
    callers: Callers[Any]

    async def end_session(self, key: str, owner: str | None = None) -> bool: ...


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")
    after: str = Field("", max_length=300, description="list the sessions whose key sorts after this one")
    limit: int = Field(MAX_PAGE, ge=1, le=MAX_PAGE, description="sessions on the page")


class End(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session: str = Field(min_length=1, max_length=300, description="the key of the session to end")


def kind_of(key: str, handles: Handles) -> str:
    """How the session is named, as its key says: a session handle, the MCP session, or the caller's x-session-id.
    Only a key shaped as a handle has its signature checked (a listing of thousands checks few)."""
    for prefix, kind in (("mcp-", "mcp session"), ("sse-", "sse connection"), ("once-", "one call")):
        if key.startswith(prefix):
            return kind
    if key.startswith(handles.namespace + ".") and handles.owns(key):
        return "handle"
    return "x-session-id"


def row(server: Operated, held: Held) -> dict[str, Any]:
    """One session as listed: `memory_bytes` only where sampled, `last_snapshot_at` only where snapshots are on."""
    found: dict[str, Any] = {
        "session": held.key,
        "owner": held.owner,
        "kind": kind_of(held.key, server.callers.handles),
        "idle_s": round(held.idle_s, 3),
        "age_s": round(held.age_s, 3),
        "busy": held.busy,
    }
    container = getattr(held.state, "container_id", None)
    if server.runtime is not None and isinstance(container, str):
        if (memory := server.runtime.memory_of_sandbox(container)) is not None:
            found["memory_bytes"] = memory
    if server.keeper is not None and server.keeper.store.enabled:
        found["last_snapshot_at"] = held.saved_at
    return found


def _refused(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status)


def _authorized(request: Request) -> bool:
    sent = request.headers.get("authorization", "")
    return hmac.compare_digest(sent.encode(), f"Bearer {admin_token()}".encode())


def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def checked(request: Request) -> Response:
        if not _authorized(request):
            return _refused(401, "the tool server's /admin routes need the fleet's admin bearer token")
        try:
            return await handler(request)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return _refused(400, f"{where}: {first['msg']}")

    return checked


def routes(server: Operated) -> list[Route]:
    """`/admin/sessions` and `/admin/sessions/end` over `server`."""

    async def listing(request: Request) -> Response:
        page = Page.model_validate(dict(request.query_params))
        held = [h for h in server.sessions.listing() if h.key > page.after]
        shown = held[: page.limit]
        more = len(held) > page.limit
        body = {
            "namespace": server.namespace,
            "total": len(server.sessions),
            "snapshots": server.keeper is not None and server.keeper.store.enabled,
            "sessions": [row(server, h) for h in shown],
            "next": shown[-1].key if more else None,
        }
        return JSONResponse(body)

    async def end(request: Request) -> Response:
        try:
            asked = End.model_validate_json(await request.body())
        except ValidationError as exc:
            return _refused(400, f'the body must be {{"session": KEY}}: {exc.errors()[0]["msg"]}')
        ended = await server.end_session(asked.session)
        log.info("admin.session_ended", session_id=asked.session, held=ended)
        return JSONResponse({"session": asked.session, "ended": ended})

    return [
        Route("/admin/sessions", guarded(listing), methods=["GET"]),
        Route("/admin/sessions/end", guarded(end), methods=["POST"]),
    ]
