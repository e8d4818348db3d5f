"""`toolfleet <service> [flags]`: one CLI whose subcommands are the services' own `python -m` entrypoints."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

SERVICES: dict[str, tuple[str, str]] = {
    "python": (
        "tools.python_sandbox.__main__",
        "python MCP tool server: stateful sandboxed Python (port 8802)",
    ),
    "browser": ("tools.browser.__main__", "browser MCP tool server: search / open / find (port 8801)"),
    "container": (
        "tools.container.__main__",
        "container MCP tool server: exec in a per-session container (8803)",
    ),
    "file_search": (
        "tools.file_search.__main__",
        "file_search MCP tool server: retrieval over vector stores (port 8804)",
    ),
    "gateway": ("gateway.__main__", "MCP gateway in front of every tool namespace (port 8800)"),
    "orchestrator": ("orchestrator.__main__", "OpenAI Responses API over a vLLM worker (port 8080)"),
    "worker": (
        "orchestrator.worker.__main__",
        "scripted vLLM-compatible worker for tests and demos (port 8000)",
    ),
}


def _usage() -> str:
    rows = "\n".join(f"  {name:<13}{help_}" for name, (_, help_) in SERVICES.items())
    return f"usage: toolfleet <service> [flags]   (toolfleet <service> --help for its flags)\n\nservices:\n{rows}\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in SERVICES:
        sys.stderr.write(f"toolfleet: unknown service {name!r}\n\n{_usage()}")
        return 2
    module = importlib.import_module(SERVICES[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
