"""The flags every docker-backed tool server shares (`--instance`, `--pool-size`, `--oci-runtime`, ...)."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from toolkit.settings import ToolServerSettings
from toolkit.wire import MEMORY_HEADER

FLEET_RUNTIME_ENV = "TOOLFLEET_OCI_RUNTIME"
"""Where set (e.g. `runsc`), the OCI runtime of every sandbox tool that is not told otherwise."""


class DockerSandboxSettings(ToolServerSettings):
    """Flags every docker-backed tool server shares (`--instance`, `--pool-size`, `--oci-runtime`, ...)."""

    memory_mb: int = Field(1024, description="memory limit of a session's sandbox (the size of the warm pool's)")
    max_session_memory_mb: int | None = Field(
        None,
        description=f"largest memory a caller may ask for a session's sandbox ({MEMORY_HEADER}: a platform "
        "container's memory_limit); default --memory-mb, so no caller gets more than the operator set",
    )
    pool_size: int = Field(2, description="warm containers kept ready so a new session starts at once (docker)")
    docker_url: str | None = Field(None, description="Docker engine URL; default from DOCKER_HOST")
    instance: str = Field("", description="label value naming this server's containers; default host-port")
    oci_runtime: str = Field(
        default_factory=lambda: os.environ.get(FLEET_RUNTIME_ENV) or "runc",
        description="OCI runtime of sandboxes: runc, or runsc (gVisor) where the engine has it; "
        f"default {FLEET_RUNTIME_ENV} (one setting for every sandbox tool), else runc",
    )
    pool_burst: int = Field(
        4,
        ge=1,
        description="sandboxes started at once while sessions wait on an empty warm pool (1: one at a time)",
    )
    memory_sample_s: float = Field(
        15.0, ge=0, description="how often the sandboxes' memory use is read from the engine for /metrics; 0: never"
    )
    lease_s: float = Field(30.0, description="an owner whose heartbeat is silent this long loses its sandboxes")
    janitor_interval_s: float = Field(30.0, description="how often sandboxes of dead owners are looked for")

    @property
    def session_memory_cap_mb(self) -> int:
        return self.max_session_memory_mb or self.memory_mb

    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{self.port}"
