"""Sandbox backends, chosen by configuration name and imported lazily (docker needs no bwrap, and vice versa)."""

from __future__ import annotations

import importlib
import shutil

from tools.python_sandbox.core import Backend
from tools.python_sandbox.settings import PythonSandboxSettings

BACKENDS: dict[str, str] = {
    "docker": "tools.python_sandbox.backends.docker:DockerBackend",
    "local": "tools.python_sandbox.backends.local:LocalBackend",
}


def choose_backend_name(requested: str) -> str:
    """`auto` means docker when an engine answers, else the local bubblewrap sandbox."""
    if requested != "auto":
        if requested not in BACKENDS:
            raise ValueError(f"unknown python backend {requested!r}; choose one of {', '.join(BACKENDS)} or auto")
        return requested
    from toolkit.containers import engine_reachable

    if engine_reachable():
        return "docker"
    if shutil.which("bwrap"):
        return "local"
    raise RuntimeError("no sandbox available: no Docker engine answers and bubblewrap (bwrap) is not installed")


def load_backend(settings: PythonSandboxSettings) -> Backend:
    module, _, cls = BACKENDS[choose_backend_name(settings.backend)].partition(":")
    return getattr(importlib.import_module(module), cls)(settings)
