"""Start a service: JSON logs, tracing, then its ASGI app under uvicorn; SIGINT/SIGTERM shut it down gracefully."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TypeVar

import sniffio
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from toolkit.logging import configure_logging
from toolkit.settings import ServiceSettings
from toolkit.tracing import flush_tracing, setup_tracing

S = TypeVar("S", bound=ServiceSettings)
Drainer = Callable[[float], Awaitable[None]]
"""An app's drain (`toolkit.drain.Drain`): given the grace period, returns when the app may stop."""


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drainer | None, grace_s: float) -> None:
        super().__init__(config)
        self._drain, self._grace_s = drain, grace_s
        self._draining: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A first SIGTERM to an app that drains (a tool server) starts its drain while it still listens, and
        stops the server only once that is over; SIGINT, and a second signal, stop it at once as before."""
        if self._drain is None or sig != signal.SIGTERM or self._draining is not None or self.should_exit:
            return super().handle_exit(sig, frame)
        self._draining = asyncio.get_event_loop().create_task(self._drain_then_exit(sig, frame))

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        assert self._drain is not None
        try:
            await self._drain(self._grace_s)
        finally:
            super().handle_exit(sig, frame)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Tell anyio, while the loop runs, that this thread runs asyncio (sniffio's documented thread-local):
        otherwise every anyio primitive - a few dozen per MCP call - asks `asyncio.current_task()`, which on
        Python 3.11 makes a `getpid()` system call (4.5 % of a tool server's CPU under load, py-spy)."""
        sniffio.thread_local.name = "asyncio"
        try:
            await super().serve(sockets=sockets)
        finally:
            sniffio.thread_local.name = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """After the app's own shutdown, send the last spans (before uvicorn re-raises the signal)."""
        await super().shutdown(sockets=sockets)
        await asyncio.to_thread(flush_tracing)


class _HeadWithBody:
    """The transport one response is written through: a head that announces a body of fixed length (every JSON
    answer: uvicorn fails a response that ends short of it) waits for the body's first write and leaves with it;
    any other write (a stream's head, a HEAD answer, a 100 Continue) goes at once. uvicorn writes a head and its
    body in two calls, which send two TCP segments: a client woken by the head alone had to wait and wake again
    for the body, in four calls in ten (the orchestrator's lean MCP client, the gateway's pool)."""

    __slots__ = ("_cycle", "_head_written", "_held", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport, self._cycle = transport, cycle
        self._head_written = False
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif not self._head_written and self._cycle.response_started:  # this write is the head
            self._head_written = True
            if self._body_follows():
                self._held = data
                return
        self._transport.write(data)

    def _body_follows(self) -> bool:
        cycle = self._cycle
        return cycle.chunked_encoding is False and cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD"

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        """A response that failed after its head: the head leaves first, as it would have before."""
        if self._held is not None and not self._transport.is_closing():
            self._transport.write(self._held)
        self._held = None
        self._transport.close()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, each response written through `_HeadWithBody`: an answer whose body is
    ready with its head (every JSON answer) leaves in one write. Only what uvicorn's request-response cycle
    writes goes through it; its 400s and WebSocket upgrades write to the connection as before."""

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before:  # a new request's cycle (an upgrade makes none)
            self.cycle.transport = _HeadWithBody(self.transport, self.cycle)  # type: ignore[assignment]


AFTER_DRAIN_S = 2.0
"""What requests still open after a drain get once the port closes: the drain was their grace period (a
streamable GET the gateway keeps open would otherwise hold the stop another drain_s, eating the stop grace
period the sandboxes' removal needs)."""


def serve(app: ASGIApp, settings: ServiceSettings) -> None:
    drain = getattr(app, "drain", None)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        lifespan="on",
        # SIGTERM drains: an app with a `drain` (a tool server, see toolkit.drain) first serves the sessions
        # it holds for up to drain_s while it takes no new one, then closes its port and gives what is still
        # open AFTER_DRAIN_S. Any other app closes its port at once (a gateway's new connection is refused
        # and it places the call on another replica) and gives requests in flight drain_s to finish (open
        # SSE streams hold it that long).
        # uvicorn annotates int but waits on any number of seconds (asyncio.wait_for)
        timeout_graceful_shutdown=settings.drain_s if drain is None else AFTER_DRAIN_S,  # type: ignore[arg-type]
        log_config=None,  # uvicorn logs through our JSON handler (toolkit.logging)
        http=OneWriteProtocol,
    )
    # The port is taken before the app starts: a second server started by mistake on a live one's port (whose
    # instance name, and so whose sandboxes, it would share by default) fails here, having touched nothing.
    _Server(config, drain, settings.drain_s).run(sockets=[config.bind_socket()])


def run_service(service: str, settings: S, build: Callable[[S], ASGIApp]) -> int:
    """Every entrypoint's start: logging and tracing first, so what `build` logs and traces is already configured."""
    configure_logging(settings.log_level, service=service)
    setup_tracing(settings, service=service)
    serve(build(settings), settings)
    return 0
