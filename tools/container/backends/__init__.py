"""Container backends, chosen by configuration name and imported lazily."""

from __future__ import annotations

from toolkit import registry
from tools.container.core import Backend
from tools.container.settings import ContainerSettings

BACKENDS: registry.Registry = {
    "docker": "tools.container.backends.docker:DockerBackend",
}


def load_backend(settings: ContainerSettings) -> Backend:
    backend: Backend = registry.load(BACKENDS, settings.backend, "container backend")(settings)
    return backend
