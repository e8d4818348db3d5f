"""`python -m tests.support.plain_service`: the smallest service started through `toolkit.serve.run_service`.

Its build step logs one event, so a test can see that logging was configured before the app was built.
"""

from __future__ import annotations

import sys

import structlog
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from toolkit.serve import run_service
from toolkit.settings import ServiceSettings


def app(settings: ServiceSettings) -> ASGIApp:
    structlog.get_logger(__name__).info("plain.built", port=settings.port)
    return Starlette(routes=[Route("/healthz", lambda _request: PlainTextResponse("ok"))])


if __name__ == "__main__":
    raise SystemExit(run_service("plain", ServiceSettings.from_args(sys.argv[1:], "plain"), app))
