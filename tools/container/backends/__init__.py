"""Container backends, chosen by configuration name and imported lazily."""

from __future__ import annotations

import importlib

from tools.container.core import Backend
from tools.container.settings import ContainerSettings

BACKENDS: dict[str, str] = {
    "docker": "tools.container.backends.docker:DockerBackend",
}


def load_backend(settings: ContainerSettings) -> Backend:
    if settings.backend not in BACKENDS:
        raise ValueError(f"unknown container backend {settings.backend!r}; choose one of {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[settings.backend].partition(":")
    return getattr(importlib.import_module(module), cls)(settings)
