"""Settings of the container tool server: flags such as `--pool-size` are also `TOOLFLEET_CONTAINER_POOL_SIZE`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.sandbox.settings import DockerSandboxSettings


class ContainerSettings(DockerSandboxSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_CONTAINER_", cli_kebab_case=True, extra="ignore")

    port: int = 8803
    backend: str = Field("docker", description="where session containers run: docker")
    image: str = Field("toolfleet/container-sandbox:latest", description="image every session container runs")
    network: str = Field("none", description="Docker network of session containers: none, or a named network")
    user: str = Field("1000:1000", description="default user of commands (uid:gid or a name the image knows)")
    allowed_users: list[str] = Field(
        default_factory=list, description="other values the `user` argument may take (e.g. root); empty = none"
    )
    workdir: str = Field("/workspace", description="the writable home and starting directory of every shell")
    timeout_s: float = Field(120.0, description="time limit of a command when the call names none")
    max_timeout_s: float = Field(600.0, description="largest time limit a call may ask for")
    cpus: float = Field(1.0, description="CPU share per session container")
    pids: int = Field(256, description="process limit per session container")
    disk_mb: int = Field(512, description="size of each writable directory (the workdir and /tmp)")
    max_output_bytes: int = Field(
        20_000, description="stdout and stderr beyond this are cut in the middle, with a note"
    )
    progress_s: float = Field(15.0, description="a long command sends an MCP progress notification this often")
