"""What one sandbox container is, as the engine is asked to create it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SandboxSpec:
    """What one sandbox container is: hardened by default (read-only root, no capabilities, no network)."""

    image: str
    command: list[str]
    user: str
    workdir: str
    writable: list[str]
    """Size-capped tmpfs mounts owned by `user`: the only writable paths."""
    memory_bytes: int
    cpus: float
    pids: int
    disk_bytes: int
    env: dict[str, str] = field(default_factory=dict)
    network: str = "none"
    stdin: bool = True
    tmpfs_mode: str = "0700"
    tmpfs_exec: bool = False
    """Allow running programs from the writable paths (the engine mounts them noexec otherwise)."""
    init: bool = False
    """Run the engine's tiny init as pid 1 (reaps orphaned processes) when the main process does not."""

    def kwargs(self) -> dict[str, Any]:
        uid, _, gid = self.user.partition(":")
        tmpfs_opts = f"rw,nosuid,nodev,size={self.disk_bytes},uid={uid},gid={gid or uid},mode={self.tmpfs_mode}"
        if self.tmpfs_exec:
            tmpfs_opts += ",exec"
        return dict(
            image=self.image,
            command=self.command,
            stdin_open=self.stdin,
            tty=False,
            detach=True,
            network_mode=self.network,
            user=self.user,
            read_only=True,
            tmpfs={path: tmpfs_opts for path in self.writable},
            working_dir=self.workdir,
            mem_limit=self.memory_bytes,
            memswap_limit=self.memory_bytes,
            nano_cpus=int(self.cpus * 1e9),
            pids_limit=self.pids,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ipc_mode="private",
            environment=self.env,
            init=self.init,
        )
