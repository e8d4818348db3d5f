"""`python -m tools.python_sandbox` / `toolfleet python`: serve the python tool over SSE and streamable HTTP."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toolkit.serve import run_service
from tools.python_sandbox.backends import load_backend
from tools.python_sandbox.server import build_server
from tools.python_sandbox.settings import PythonSandboxSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = PythonSandboxSettings.from_args(sys.argv[1:] if argv is None else argv, prog="toolfleet python")
    return run_service("python", settings, lambda s: build_server(s, load_backend(s)).build_app())


if __name__ == "__main__":
    raise SystemExit(main())
