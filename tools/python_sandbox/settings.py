"""Settings of the python tool server: flags such as `--pool-size` are also `TOOLFLEET_PYTHON_POOL_SIZE`."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.sandbox.settings import DockerSandboxSettings
from toolkit.snapshots import Limits as SnapshotLimits
from toolkit.snapshots import SnapshotStore, open_snapshots
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
    # snapshots
    snapshots: str = Field(
        "none",
        description="where sessions are saved as eviction, idle reaping or a stop (SIGTERM) takes them, to be "
        "restored on their next call: none (lost, as before), dir (--snapshot-dir) or redis (--snapshot-url)",
    )
    snapshot_dir: str = Field("/var/lib/toolfleet/snapshots", description="the dir store's folder (--snapshots dir)")
    snapshot_url: str = Field("redis://127.0.0.1:6379/0", description="the redis store's URL (--snapshots redis)")
    snapshot_max_mib: int = Field(256, description="largest snapshot of one session; a larger one is not saved")
    snapshot_ttl_s: float = Field(7 * 24 * 3600.0, description="a snapshot older than this is not restored")
    snapshot_every_s: float = Field(
        2.0,
        ge=0,
        description="with --snapshots, also save a session in the background once it has been quiet this long "
        "after a call (at the latest 3x this after its first unsaved change): what a killed server loses; 0: off",
    )

    def snapshot_store(self) -> SnapshotStore:
        where = self.snapshot_url if self.snapshots == "redis" else self.snapshot_dir
        limits = SnapshotLimits(per_session_bytes=self.snapshot_max_mib * 2**20, ttl_s=self.snapshot_ttl_s)
        return open_snapshots(self.snapshots, where, limits)

    def limits(self) -> Limits:
        return Limits(
            timeout_s=self.timeout_s,
            memory_bytes=self.memory_mb * 1024 * 1024,
            cpus=self.cpus,
            pids=self.pids,
            disk_bytes=self.disk_mb * 1024 * 1024,
            max_output_chars=self.max_output_chars,
        )
