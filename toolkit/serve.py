"""Run an ASGI app with uvicorn under the service's settings; SIGINT/SIGTERM shut it down gracefully."""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from starlette.types import ASGIApp

from toolkit.settings import ServiceSettings
from toolkit.tracing import flush_tracing


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
        timeout_graceful_shutdown=5,
        log_config=None,  # uvicorn logs through our JSON handler (toolkit.logging)
    )
    _Server(config).run()
