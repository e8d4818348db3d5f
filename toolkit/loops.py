"""Background loops whose end is seen: a service's long-running jobs (health probes, discovery, the session
reaper) run under `Loops`, which records a loop that ended - by an exception or by returning - and logs it.
`/healthz` answers 503 naming the loop and its error's class (the message, which can hold an internal address,
goes only to the log), so the engine's health check (or the orchestrator of the fleet)
replaces the process, instead of a process serving on with a picture of the fleet that no longer moves (a
gateway's health loop once died on a transient Redis timeout while its container still reported healthy).
Cancellation at shutdown is not a death: anyio's cancel exception is not an `Exception`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from anyio.abc import TaskGroup

log = structlog.get_logger(__name__)


class Loops:
    def __init__(self) -> None:
        self.dead: dict[str, str] = {}
        """Loop name -> how it ended, for each loop that is no longer running."""

    def start(self, tg: TaskGroup, name: str, loop: Callable[..., Awaitable[Any]], *args: Any) -> None:
        tg.start_soon(self._watch, name, loop, *args, name=name)

    async def _watch(self, name: str, loop: Callable[..., Awaitable[Any]], *args: Any) -> None:
        try:
            await loop(*args)
        except Exception as exc:
            # Only the class: `/healthz` is open, and a message can carry an address (a store's, a replica's);
            # the whole of it goes to the log. Recorded before the log: rendering a traceback takes a while.
            self.dead[name] = type(exc).__name__
            log.exception("loop.died", loop=name)
        else:
            self.dead[name] = "returned"
            log.error("loop.died", loop=name, error="returned")

    def health(self) -> tuple[int, dict[str, Any]]:
        """The status code and body `/healthz` answers: 200 while every loop runs."""
        if self.dead:
            return 503, {"status": "failing", "dead_loops": dict(self.dead)}
        return 200, {"status": "ok"}
