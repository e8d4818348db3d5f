"""The flags every sandbox tool server shares (`--instance`, `--pool-size`, `--oci-runtime`, `--snapshots`, ...)."""

from __future__ import annotations

import os
import socket
from typing import Self

from pydantic import Field, model_validator

from toolkit.settings import ToolServerSettings
from toolkit.snapshots import Limits as SnapshotLimits
from toolkit.snapshots import SnapshotStore, open_snapshots
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.wire import MEMORY_HEADER

FLEET_RUNTIME_ENV = "TOOLFLEET_OCI_RUNTIME"
"""Where set (e.g. `runsc`), the OCI runtime of every sandbox tool that is not told otherwise."""


class DockerSandboxSettings(ToolServerSettings):
    """Flags every sandbox tool server shares: its docker sandboxes' (`--instance`, `--pool-size`, `--oci-runtime`,
    ...) and where its sessions are saved (`--snapshots` and the `--snapshot-*` flags)."""

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

    @model_validator(mode="after")
    def _tasks_counted_with_snapshots(self) -> Self:
        """A fleet that saves sessions in Redis counts its MCP tasks there too, unless told another place."""
        if self.task_counts_url is None and self.snapshots == "redis":
            self.task_counts_url = self.snapshot_url
        return self

    @property
    def session_memory_cap_mb(self) -> int:
        return self.max_session_memory_mb or self.memory_mb

    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{self.port}"

    def snapshot_store(self) -> SnapshotStore:
        where = self.snapshot_url if self.snapshots == "redis" else self.snapshot_dir
        limits = SnapshotLimits(per_session_bytes=self.snapshot_max_mib * 2**20, ttl_s=self.snapshot_ttl_s)
        return open_snapshots(self.snapshots, where, limits)

    def keeper(self, namespace: str) -> SnapshotKeeper | None:
        """The session saver `--snapshots` asks for; None keeps a session's state only as long as its sandbox."""
        if self.snapshots == "none":
            return None
        return SnapshotKeeper(self.snapshot_store(), namespace, every_s=self.snapshot_every_s)
