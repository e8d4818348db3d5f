"""Sandbox backends, chosen by configuration name and imported lazily (docker needs no bwrap, and vice versa)."""

from __future__ import annotations

import shutil

from toolkit import registry
from tools.python_sandbox.core import Backend
from tools.python_sandbox.settings import PythonSandboxSettings

BACKENDS: registry.Registry = {
    "docker": "tools.python_sandbox.backends.docker:DockerBackend",
    "local": "tools.python_sandbox.backends.local:LocalBackend",
}


def choose_backend_name(requested: str) -> str:
    """`auto` means docker when an engine answers, else the local bubblewrap sandbox."""
    if registry.check(BACKENDS, requested, "python backend", also=["auto"]) != "auto":
        return requested
    from toolkit.sandbox.engine import engine_reachable

    if engine_reachable():
        return "docker"
    if shutil.which("bwrap"):
        return "local"
    raise RuntimeError("no sandbox available: no Docker engine answers and bubblewrap (bwrap) is not installed")


def load_backend(settings: PythonSandboxSettings) -> Backend:
    backend: Backend = registry.load(BACKENDS, choose_backend_name(settings.backend), "python backend")(settings)
    return backend
