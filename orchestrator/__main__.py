"""`toolfleet orchestrator` / `python -m orchestrator`: the Responses API service (port 8080)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit.serve import run_service

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from orchestrator.settings import OrchestratorSettings


def app(settings: OrchestratorSettings) -> ASGIApp:
    """The Responses app, with harmony and its vocabularies loaded before the first request rather than during it:
    Harmony's, and tiktoken's o200k that message text is encoded with (~0.6 s here, on the first response's loop)."""
    from orchestrator.harmony import encoding
    from toolkit.vocab import o200k

    encoding()
    o200k()
    from orchestrator.app import create_app

    return create_app(settings)


def main(argv: Sequence[str] | None = None) -> int:
    from orchestrator.settings import OrchestratorSettings

    settings = OrchestratorSettings.from_args(list(sys.argv[1:] if argv is None else argv), "toolfleet orchestrator")
    return run_service("orchestrator", settings, app)


if __name__ == "__main__":
    raise SystemExit(main())
