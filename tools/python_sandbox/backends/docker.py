"""Docker backend: one container per session with the kernel as its pid 1, and a warm pool.

The container plumbing (labels, leftovers, owner leases, pool, limits, OCI runtime, Docker error
translation) is the kit's `toolkit.sandbox`, and the pooled attached sandbox its `toolkit.sandbox.backend`;
this module says only what a python sandbox is:
the kernel as pid 1 talking over the container's attached stdin/stdout, so a call costs one
round trip on the engine's socket (no `docker exec`, no new interpreter), `/mnt/data` and `/tmp`
as the only writable paths, uid 65534.
"""

from __future__ import annotations

import dataclasses

from toolkit.sandbox.backend import AttachedSandbox, DockerSandboxes
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sandbox.specs import SandboxSpec
from toolkit.sandbox.stream import AttachedStream
from tools.python_sandbox.core import (
    KERNEL_SOURCE,
    READER_LIMIT,
    ChannelKernel,
    KernelChannel,
    KernelDied,
    Limits,
    SandboxError,
)
from tools.python_sandbox.settings import PythonSandboxSettings

ROLE = "python-sandbox"


class DockerKernel(ChannelKernel, AttachedSandbox):
    def __init__(self, runtime: ContainerRuntime, stream: AttachedStream) -> None:
        ChannelKernel.__init__(self, KernelChannel(stream.reader, stream.writer))
        AttachedSandbox.__init__(self, runtime, stream)

    async def ready(self, timeout_s: float) -> None:
        try:
            await self.channel.wait_ready(timeout_s)
        except KernelDied as exc:
            raise SandboxError(f"sandbox container did not come up: {exc}") from exc


class DockerBackend(DockerSandboxes[DockerKernel]):
    noun = "kernel"

    def __init__(self, settings: PythonSandboxSettings) -> None:
        self._limits = settings.limits()
        self._image = settings.image
        super().__init__(settings, role=ROLE, spec=self._spec_of(self._limits), reader_limit=READER_LIMIT)

    def _spec_of(self, lim: Limits) -> SandboxSpec:
        config = lim.kernel_config(workdir="/mnt/data", capture_path="/tmp/.toolfleet-output", processes=None)
        return SandboxSpec(
            image=self._image,
            command=["python3", "-u", "-c", KERNEL_SOURCE, config],
            user="65534:65534",
            workdir="/mnt/data",
            writable=["/mnt/data", "/tmp"],
            memory_bytes=lim.memory_bytes,
            cpus=lim.cpus,
            pids=lim.pids,
            disk_bytes=lim.disk_bytes,
            env={"HOME": "/mnt/data", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib"},
        )

    def attach(self, stream: AttachedStream) -> DockerKernel:
        return DockerKernel(self.runtime, stream)

    def sized(self, memory_mb: int) -> SandboxSpec:
        """Set in the kernel's config too: its address-space rlimit is set as it starts, and a `docker update`
        of the cgroup alone would not lift it."""
        return self._spec_of(dataclasses.replace(self._limits, memory_bytes=memory_mb * 2**20))

    async def new_kernel(self, session_id: str, memory_mb: int | None = None) -> DockerKernel:
        return await self.new_sandbox(session_id, memory_mb)
