"""`python -m tools.container` / `toolfleet container`: serve the container tool over SSE and streamable HTTP."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toolkit.serve import run_service
from tools.container.backends import load_backend
from tools.container.server import build_server
from tools.container.settings import ContainerSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = ContainerSettings.from_args(sys.argv[1:] if argv is None else argv, prog="toolfleet container")
    return run_service("container", settings, lambda s: build_server(s, load_backend(s)).build_app())


if __name__ == "__main__":
    raise SystemExit(main())
