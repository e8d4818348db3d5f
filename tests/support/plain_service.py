"""`python -m tests.support.plain_service`: the smallest service started through `toolkit.serve.run_service`.

Its build step logs one event, so a test can see that logging was configured before the app was built. Its
`/stream` sends one line and then never ends (until the client hangs up): a stream's head must not wait for its end.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from toolkit.serve import run_service
from toolkit.settings import ServiceSettings


async def _endless(_request: Request) -> StreamingResponse:
    async def lines() -> AsyncIterator[bytes]:
        yield b"first\n"
        await asyncio.Event().wait()  # set by no one: the stream ends when its client hangs up

    return StreamingResponse(lines(), media_type="text/plain")


def app(settings: ServiceSettings) -> ASGIApp:
    structlog.get_logger(__name__).info("plain.built", port=settings.port)
    return Starlette(routes=[Route("/healthz", lambda _request: PlainTextResponse("ok")), Route("/stream", _endless)])


if __name__ == "__main__":
    raise SystemExit(run_service("plain", ServiceSettings.from_args(sys.argv[1:], "plain"), app))
