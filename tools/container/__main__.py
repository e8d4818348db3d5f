"""`python -m tools.container` / `toolfleet container`: serve the container tool over SSE and streamable HTTP."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toolkit.logging import configure_logging
from toolkit.serve import serve
from tools.container.backends import load_backend
from tools.container.server import build_server
from tools.container.settings import ContainerSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = ContainerSettings.from_args(sys.argv[1:] if argv is None else argv, prog="toolfleet container")
    configure_logging(settings.log_level, service="container")
    serve(build_server(settings, load_backend(settings)).build_app(), settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
