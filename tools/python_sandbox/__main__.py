"""`python -m tools.python_sandbox` / `toolfleet python`: serve the python tool over SSE and streamable HTTP."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toolkit.logging import configure_logging
from toolkit.serve import serve
from toolkit.tracing import setup_tracing
from tools.python_sandbox.backends import load_backend
from tools.python_sandbox.server import build_server
from tools.python_sandbox.settings import PythonSandboxSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = PythonSandboxSettings.from_args(sys.argv[1:] if argv is None else argv, prog="toolfleet python")
    configure_logging(settings.log_level, service="python")
    setup_tracing(settings, service="python")
    serve(build_server(settings, load_backend(settings)).build_app(), settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
