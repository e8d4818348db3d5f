"""Start a service: JSON logs, tracing, then its ASGI app under uvicorn; SIGINT/SIGTERM shut it down gracefully."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import TypeVar

import uvicorn
from starlette.types import ASGIApp

from toolkit.logging import configure_logging
from toolkit.settings import ServiceSettings
from toolkit.tracing import flush_tracing, setup_tracing

S = TypeVar("S", bound=ServiceSettings)


class _Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """After the app's own shutdown, send the last spans (before uvicorn re-raises the signal)."""
        await super().shutdown(sockets=sockets)
        await asyncio.to_thread(flush_tracing)


def serve(app: ASGIApp, settings: ServiceSettings) -> None:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        lifespan="on",
        # SIGTERM drains: the listening socket closes at once (a gateway's new connection is refused and it
        # places the call on another replica), requests in flight get drain_s to finish (open SSE streams
        # hold it that long).
        timeout_graceful_shutdown=settings.drain_s,
        log_config=None,  # uvicorn logs through our JSON handler (toolkit.logging)
    )
    _Server(config).run()


def run_service(service: str, settings: S, build: Callable[[S], ASGIApp]) -> int:
    """Every entrypoint's start: logging and tracing first, so what `build` logs and traces is already configured."""
    configure_logging(settings.log_level, service=service)
    setup_tracing(settings, service=service)
    serve(build(settings), settings)
    return 0
