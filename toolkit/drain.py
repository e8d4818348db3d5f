"""Draining a tool replica without losing a call, and what it tells the gateway about itself.

On SIGTERM a replica does not stop listening at once (`toolkit.serve` asks it to drain first): it turns
unready (`/readyz` 503), refuses only what would open a session it does not hold (HTTP 503 with the
`Toolfleet-Draining` header: the gateway, which never sent that request anywhere else, places it on another
replica), and keeps serving the sessions it holds - calls in flight and follow-up calls - until they are all
gone or the grace period (`--drain-s`) ends. Then it stops; the gateway moves the sessions it still pinned
there to other replicas and says so (`Toolfleet-Session-Reset`), so their next call gets the reset notice
rather than an error.

Every answer also carries `Toolfleet-Room` (sessions this replica can still open), from which the gateway
places a new session on the replica with the most room.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import Scope

from toolkit import handles
from toolkit.wire import DRAINING_HEADER, INSTANCE_HEADER, ROOM_HEADER, SESSION_HEADER

log = structlog.get_logger(__name__)

DRAINED_CODE = -32001
"""The JSON-RPC error code of a refusal by a draining replica."""
DRAINED_WORDS = "this replica is draining (shutting down): it takes no new session; another replica will"


class Drain:
    """A replica's drain state, shared by its front (`toolkit.front`), its `/readyz` and `toolkit.serve`."""

    def __init__(
        self, holds: Callable[[str], bool], sessions: Callable[[], int], room: Callable[[], int], *, instance: str
    ) -> None:
        self._holds, self._sessions, self._room = holds, sessions, room
        self.instance = instance
        """This replica's instance id, stamped on every answer (`INSTANCE_HEADER`)."""
        self.draining = False
        self.in_flight = 0
        self._empty: anyio.Event | None = None
        """Set once nothing is held or in flight, while a drain waits for that."""

    async def __call__(self, grace_s: float) -> None:
        """Stop taking sessions and wait, at most `grace_s`, for those held to end and calls in flight to finish."""
        self.draining = True
        self._empty = anyio.Event()
        log.info("server.draining", sessions=self._sessions(), in_flight=self.in_flight, grace_s=grace_s)
        self.changed()
        with anyio.move_on_after(grace_s) as scope:
            await self._empty.wait()
        log.info("server.drained", sessions=self._sessions(), in_flight=self.in_flight, graced=scope.cancel_called)

    def changed(self) -> None:
        """A session ended or a call finished: a drain waiting for nothing to be left may be over."""
        if self._empty is not None and not self._sessions() and not self.in_flight:
            self._empty.set()

    def opens_session(self, scope: Scope) -> bool:
        """Whether a request would start a session this replica does not hold (what a draining one refuses)."""
        if scope["path"] == "/sse":
            return True  # a legacy SSE connection is a session of its own
        if scope["path"] != "/mcp" or scope["method"] != "POST":
            return False
        headers = Headers(scope=scope)
        if headers.get("mcp-session-id"):
            return False  # an MCP session this replica opened
        if (sid := headers.get(SESSION_HEADER)) is not None:
            return not self._holds(sid)
        handle = headers.get(f"mcp-param-{handles.HEADER_TOKEN.lower()}")
        return handle is None or handle == handles.NEW or not self._holds(handle)

    def stamp(self, headers: MutableHeaders) -> None:
        headers[ROOM_HEADER] = str(max(self._room(), 0))
        headers[INSTANCE_HEADER] = self.instance
        if self.draining:
            headers[DRAINING_HEADER] = "1"
