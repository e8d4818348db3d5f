"""Settings of the python tool server: flags such as `--pool-size` are also `TOOLFLEET_PYTHON_POOL_SIZE`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.sandbox.settings import DockerSandboxSettings
from tools.python_sandbox.core import Limits


class PythonSandboxSettings(DockerSandboxSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_PYTHON_", cli_kebab_case=True, extra="ignore")

    port: int = 8802
    backend: str = Field("auto", description="docker, local (bubblewrap) or auto (docker when an engine answers)")
    timeout_s: float = Field(30.0, description="per-call time limit, stated to the model in the instructions")
    cpus: float = Field(1.0, description="CPU share per session (docker)")
    pids: int = Field(128, description="process limit per session")
    disk_mb: int = Field(256, description="size of the writable /mnt/data (and the largest file)")
    max_code_chars: int = Field(100_000, description="longest code accepted in one call")
    max_output_chars: int = Field(20_000, description="output beyond this is cut, with a note")
    # docker backend
    image: str = Field("toolfleet/python-sandbox:latest", description="image each session runs in (docker)")
    # local backend
    local_python: str = Field("/usr/bin/python3", description="interpreter run inside bubblewrap (local)")
    local_uid_base: int = Field(200_000, description="first host uid of per-session users when run as root (local)")

    def limits(self) -> Limits:
        return Limits(
            timeout_s=self.timeout_s,
            memory_bytes=self.memory_mb * 1024 * 1024,
            cpus=self.cpus,
            pids=self.pids,
            disk_bytes=self.disk_mb * 1024 * 1024,
            max_output_chars=self.max_output_chars,
        )
