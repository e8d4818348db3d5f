"""Run an ASGI app with uvicorn under the service's settings; SIGINT/SIGTERM shut it down gracefully."""

from __future__ import annotations

import uvicorn
from starlette.types import ASGIApp

from toolkit.settings import ServiceSettings


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
    uvicorn.Server(config).run()
