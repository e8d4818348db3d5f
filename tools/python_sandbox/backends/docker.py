"""Docker backend: one container per session with the kernel as its pid 1, and a warm pool.

The container plumbing (labels, leftovers, owner leases, pool, limits, OCI runtime, Docker error
translation) is the kit's `toolkit.containers`; this module says only what a python sandbox is:
the kernel as pid 1 talking over the container's attached stdin/stdout, so a call costs one
round trip on the engine's socket (no `docker exec`, no new interpreter), `/mnt/data` and `/tmp`
as the only writable paths, uid 65534.
"""

from __future__ import annotations

import dataclasses

import structlog

from toolkit.containers import AttachedStream, ContainerRuntime, SandboxSpec, WarmPool
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

log = structlog.get_logger(__name__)

ROLE = "python-sandbox"


class DockerKernel(ChannelKernel):
    def __init__(self, runtime: ContainerRuntime, stream: AttachedStream) -> None:
        super().__init__(KernelChannel(stream.reader, stream.writer))
        self._runtime = runtime
        self._stream = stream
        self.container_id = stream.container_id

    async def aclose(self) -> None:
        self._stream.close()
        await self._runtime.remove(self.container_id)


class DockerBackend:
    name = "docker"

    def __init__(self, settings: PythonSandboxSettings) -> None:
        self._image = settings.image
        self._limits = settings.limits()
        self._spec = self._spec_of(self._limits)
        self.runtime = ContainerRuntime(settings, role=ROLE, image=settings.image)
        self._pool: WarmPool[DockerKernel] = WarmPool(
            lambda: self._spawn(self._spec), settings.pool_size, self.runtime, burst=settings.pool_burst
        )

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

    async def start(self) -> None:
        await self.runtime.start()
        self._pool.start()

    async def _spawn(self, spec: SandboxSpec) -> DockerKernel:
        kernel = DockerKernel(self.runtime, await self.runtime.start_attached(spec, limit=READER_LIMIT))
        try:
            await kernel.channel.wait_ready(timeout_s=30)
        except KernelDied as exc:
            await kernel.aclose()
            raise SandboxError(f"sandbox container did not come up: {exc}") from exc
        return kernel

    async def new_kernel(self, session_id: str, memory_mb: int | None = None) -> DockerKernel:
        """A warm kernel from the pool when one is ready, else a fresh one; a fresh one always for another
        size than the pool's, since the kernel's address-space rlimit is set as it starts and a `docker
        update` of the cgroup alone would not lift it."""
        if memory_mb is not None:
            lim = dataclasses.replace(self._limits, memory_bytes=memory_mb * 2**20)
            kernel = await self._pool.fresh(lambda: self._spawn(self._spec_of(lim)))
            log.info("kernel.sized", session_id=session_id, container=kernel.container_id[:12], memory_mb=memory_mb)
            return kernel
        kernel = await self._pool.take()
        log.info("kernel.assigned", session_id=session_id, container=kernel.container_id[:12], pooled=len(self._pool))
        return kernel

    async def aclose(self) -> None:
        await self._pool.aclose()
        await self.runtime.aclose()
