"""`toolfleet orchestrator` / `python -m orchestrator`: the Responses API service (port 8080)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toolkit.logging import configure_logging
from toolkit.serve import serve
from toolkit.tracing import setup_tracing


def main(argv: Sequence[str] | None = None) -> int:
    from orchestrator.harmony import encoding
    from orchestrator.settings import OrchestratorSettings

    settings = OrchestratorSettings.from_args(list(sys.argv[1:] if argv is None else argv), "toolfleet orchestrator")
    configure_logging(settings.log_level, service="orchestrator")
    setup_tracing(settings, service="orchestrator")
    encoding()  # unpack the vocabulary and load harmony before the first request
    from orchestrator.app import create_app

    serve(create_app(settings), settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
