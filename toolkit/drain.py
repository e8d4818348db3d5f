"""Draining a tool replica without losing a call, and what it tells the gateway about itself.

On SIGTERM a replica does not stop listening at once (`toolkit.serve` asks it to drain first): it turns
unready (`/readyz` 503), refuses only what would open a session it does not hold (HTTP 503 with the
`Toolfleet-Draining` header: the gateway, which never sent that request anywhere else, places it on another
replica), and keeps serving the sessions it holds - calls in flight and follow-up calls - until they are all
gone or the grace period (`--drain-s`) ends. Then it stops; the gateway moves the sessions it still pinned
there to other replicas and says so (`Toolfleet-Session-Reset`), so their next call gets the reset notice
rather than an error.

With snapshots the sessions need not wait for the stop: the drain hands each idle one over (`hand_over`:
saved, then let go) at once, and each busy one as its call ends. Its next call is then refused here like a
new session's, and the gateway moves it to another replica, which restores it before the call runs. A session
that could not be saved stays, served as above. A replica that handed sessions over still waits out the grace
period, refusing their calls: the gateway must hear that it drains (from a refusal or its next health probe)
before it stops, for a replica that vanishes unannounced is taken for killed, and its sessions for lost.

MCP tasks are waited for too: a draining replica starts none (the draining answer), still answers `tasks/*`
about its own, and at the end of the grace period ends the ones still working `failed` with the reason (their
processes killed), then gives each caller up to `LAST_WORD_S` to read it.

Every answer also carries `Toolfleet-Room` (sessions this replica can still open), from which the gateway
places a new session on the replica with the most room.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

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


LAST_WORD_S = 5.0
"""How long a drain that failed its unfinished tasks at its deadline waits for their callers to read why."""


class DrainedTasks(Protocol):
    """What a drain needs of the replica's MCP tasks (`toolkit.tasks.TaskStore`)."""

    @property
    def working(self) -> int: ...

    def refuse_new(self) -> None: ...

    async def fail_working(self, why: str, told_within_s: float) -> int: ...


class Drain:
    """A replica's drain state, shared by its front (`toolkit.front`), its `/readyz` and `toolkit.serve`."""

    def __init__(
        self,
        holds: Callable[[str], bool],
        sessions: Callable[[], int],
        room: Callable[[], int],
        hand_over: Callable[[], Awaitable[int]] | None = None,
        *,
        instance: str,
        tasks: DrainedTasks | None = None,
    ) -> None:
        self._holds, self._sessions, self._room, self._hand_over = holds, sessions, room, hand_over
        self._tasks = tasks
        self.instance = instance
        """This replica's instance id, stamped on every answer (`INSTANCE_HEADER`)."""
        self.draining = False
        self.in_flight = 0
        self._changed: anyio.Event | None = None
        """Set when a session ends or a call finishes, while a drain waits."""

    async def __call__(self, grace_s: float) -> None:
        """Stop taking sessions and tasks and wait, at most `grace_s`, for the sessions held to end (or be handed
        over), calls in flight to finish and MCP tasks to end; a task still working then ends `failed`."""
        self.draining = True
        if self._tasks is not None:
            self._tasks.refuse_new()
        log.info("server.draining", sessions=self._sessions(), in_flight=self.in_flight, grace_s=grace_s)
        handed = 0
        with anyio.move_on_after(grace_s) as scope:
            while self._busy():
                self._changed = anyio.Event()  # before handing over: a change meanwhile is not missed
                if self._hand_over is not None:
                    handed += await self._hand_over()
                if self._busy():
                    await self._changed.wait()
            if handed:  # see the module's docstring: the gateway must hear of the drain first
                await anyio.sleep_forever()
        failed = 0
        if self._tasks is not None and self._tasks.working:
            why = f"the tool server stopped: its drain ({grace_s:g} s) ended before the task did"
            failed = await self._tasks.fail_working(why, LAST_WORD_S)
        log.info(
            "server.drained",
            sessions=self._sessions(),
            in_flight=self.in_flight,
            handed_over=handed,
            tasks_failed=failed,
            graced=scope.cancel_called,
        )

    def _busy(self) -> bool:
        return bool(self._sessions() or self.in_flight or (self._tasks is not None and self._tasks.working))

    def changed(self) -> None:
        """A session ended, a call finished or a task ended: a waiting drain looks again (it may be over, or have
        more to hand over)."""
        if self._changed is not None:
            self._changed.set()

    def opens_session(self, scope: Scope) -> bool:
        """Whether a request would start a session this replica does not hold (what a draining one refuses)."""
        if scope["path"] == "/sse":
            return True  # a legacy SSE connection is a session of its own
        if scope["path"] != "/mcp" or scope["method"] != "POST":
            return False
        headers = Headers(scope=scope)
        if headers.get("mcp-method", "").startswith("tasks/"):
            return False  # a task of this replica's: read, answered or cancelled while the drain waits for it
        if (sid := headers.get(SESSION_HEADER)) is not None:
            return not self._holds(sid)  # in an MCP session too: its state was handed over, or never began here
        handle = headers.get(f"mcp-param-{handles.HEADER_TOKEN.lower()}")
        if handle is not None:
            return handle == handles.NEW or not self._holds(handle)
        return not headers.get("mcp-session-id")  # an MCP session this replica opened holds its own state

    def stamp(self, headers: MutableHeaders) -> None:
        headers[ROOM_HEADER] = str(max(self._room(), 0))
        headers[INSTANCE_HEADER] = self.instance
        if self.draining:
            headers[DRAINING_HEADER] = "1"
