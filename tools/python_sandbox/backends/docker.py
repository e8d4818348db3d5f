"""Docker backend: one container per session with the kernel as its pid 1, and a warm pool.

Each container: `--network none`, uid 65534, read-only root, size-capped tmpfs at /mnt/data and
/tmp, memory / CPU / pids limits, all capabilities dropped, `no-new-privileges`, labelled with
`toolfleet.instance` so this server removes its own leftovers at start and everything at stop.
The kernel talks over the container's attached stdin/stdout (Docker's multiplexed stream), so a
call costs one round trip on the engine's socket: no `docker exec`, no new interpreter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import anyio
import docker
import docker.errors
import structlog

from tools.python_sandbox.core import (
    KERNEL_SOURCE,
    READER_LIMIT,
    ChannelKernel,
    KernelChannel,
    KernelDied,
    SandboxError,
)
from tools.python_sandbox.settings import PythonSandboxSettings

log = structlog.get_logger(__name__)

ROLE_LABEL = "toolfleet.role"
INSTANCE_LABEL = "toolfleet.instance"
ROLE = "python-sandbox"


def engine_reachable(url: str | None = None) -> bool:
    try:
        client = docker.DockerClient(base_url=url) if url else docker.from_env()
        with contextlib.closing(client):
            return bool(client.ping())
    except docker.errors.DockerException:
        return False


@contextlib.contextmanager
def docker_errors(what: str) -> Iterator[None]:
    """Translate the Docker SDK's exceptions where they enter."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"{what}: image not found ({exc.explanation}); run deploy/build-images.sh") from exc
    except docker.errors.DockerException as exc:
        raise SandboxError(f"{what}: {exc}") from exc


async def _demux(raw: asyncio.StreamReader, stdout: asyncio.StreamReader) -> None:
    """Split Docker's multiplexed attach stream: stdout frames feed the kernel channel, stderr is logged."""
    try:
        while True:
            header = await raw.readexactly(8)
            kind, size = header[0], struct.unpack(">I", header[4:])[0]
            payload = await raw.readexactly(size)
            if kind == 1:
                stdout.feed_data(payload)
            else:
                log.warning("kernel.stderr", text=payload[:2000].decode(errors="replace"))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        stdout.feed_eof()


class DockerKernel(ChannelKernel):
    def __init__(self, backend: DockerBackend, container_id: str, channel: KernelChannel, demux: asyncio.Task) -> None:
        super().__init__(channel)
        self._backend = backend
        self.container_id = container_id
        self._demux = demux

    async def aclose(self) -> None:
        self.channel.close()
        self._demux.cancel()
        await self._backend.remove(self.container_id)


class DockerBackend:
    name = "docker"

    def __init__(self, settings: PythonSandboxSettings) -> None:
        self._settings = settings
        self._limits = settings.limits()
        self.instance = settings.instance or f"{socket.gethostname()}-{settings.port}"
        self._client: docker.DockerClient | None = None
        self._pool: collections.deque[DockerKernel] = collections.deque()
        self._wanted = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._config = self._limits.kernel_config(
            workdir="/mnt/data", capture_path="/tmp/.toolfleet-output", processes=None
        )

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise SandboxError("docker backend not started")
        return self._client

    async def start(self) -> None:
        def connect() -> docker.DockerClient:
            with docker_errors("cannot reach the Docker engine"):
                client = (
                    docker.DockerClient(base_url=self._settings.docker_url)
                    if self._settings.docker_url
                    else docker.from_env()
                )
                client.ping()
            with docker_errors(f"image {self._settings.image}"):
                client.images.get(self._settings.image)
            return client

        self._client = await anyio.to_thread.run_sync(connect)
        stale = await self.remove_all()
        log.info(
            "backend.ready",
            backend=self.name,
            instance=self.instance,
            removed_stale=stale,
            pool_size=self._settings.pool_size,
        )
        if self._settings.pool_size > 0:
            self._filler = asyncio.create_task(self._fill_pool())

    def _container_kwargs(self) -> dict[str, Any]:
        lim, size = self._limits, self._limits.disk_bytes
        tmpfs_opts = f"rw,nosuid,nodev,size={size},uid=65534,gid=65534,mode=0700"
        return dict(
            image=self._settings.image,
            command=["python3", "-u", "-c", KERNEL_SOURCE, self._config],
            stdin_open=True,
            tty=False,
            detach=True,
            network_mode="none",
            user="65534:65534",
            read_only=True,
            tmpfs={"/mnt/data": tmpfs_opts, "/tmp": tmpfs_opts},
            working_dir="/mnt/data",
            mem_limit=lim.memory_bytes,
            memswap_limit=lim.memory_bytes,
            nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ipc_mode="private",
            environment={"HOME": "/mnt/data", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib"},
            labels={ROLE_LABEL: ROLE, INSTANCE_LABEL: self.instance},
        )

    def _create_and_attach(self) -> tuple[str, socket.socket]:
        """Blocking: create, attach before start (so no output is lost), start."""
        with docker_errors("cannot start a sandbox container"):
            container = self.client.containers.create(**self._container_kwargs())
            try:
                attached = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                raw = getattr(attached, "_sock", attached)
                sock = socket.socket(fileno=os.dup(raw.fileno()))
                attached.close()
                container.start()
            except BaseException:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
                raise
            return container.id, sock

    async def _spawn(self) -> DockerKernel:
        container_id, sock = await anyio.to_thread.run_sync(self._create_and_attach)
        try:
            raw_reader, writer = await asyncio.open_connection(sock=sock, limit=READER_LIMIT)
            stdout = asyncio.StreamReader(limit=READER_LIMIT)
            demux = asyncio.create_task(_demux(raw_reader, stdout))
            kernel = DockerKernel(self, container_id, KernelChannel(stdout, writer), demux)
        except BaseException:
            sock.close()
            await self.remove(container_id)
            raise
        try:
            await kernel.channel.wait_ready(timeout_s=30)
        except KernelDied as exc:
            await kernel.aclose()
            raise SandboxError(f"sandbox container did not come up: {exc}") from exc
        return kernel

    async def new_kernel(self, session_id: str) -> DockerKernel:
        """A warm kernel from the pool when one is ready, else a fresh one."""
        self._wanted.set()
        if self._pool:
            kernel = self._pool.popleft()
        else:
            kernel = await self._spawn()
        log.info("kernel.assigned", session_id=session_id, container=kernel.container_id[:12], pooled=len(self._pool))
        return kernel

    async def _fill_pool(self) -> None:
        """Keep `pool_size` kernels ready, one start at a time; back off when the engine fails."""
        while True:
            while len(self._pool) < self._settings.pool_size:
                try:
                    self._pool.append(await self._spawn())
                except SandboxError as exc:
                    log.warning("pool.fill_failed", error=str(exc))
                    await asyncio.sleep(2)
            self._wanted.clear()
            await self._wanted.wait()

    async def remove(self, container_id: str) -> None:
        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound), docker_errors("cannot remove a sandbox container"):
                self.client.api.remove_container(container_id, force=True)

        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(remove)
            except SandboxError as exc:
                log.warning("container.remove_failed", container=container_id[:12], error=str(exc))

    async def remove_all(self) -> int:
        """Remove every container of this instance (leftovers of a crash, or all at shutdown)."""

        def listing() -> list[str]:
            with docker_errors("cannot list sandbox containers"):
                filters = {"label": [f"{ROLE_LABEL}={ROLE}", f"{INSTANCE_LABEL}={self.instance}"]}
                return [c["Id"] for c in self.client.api.containers(all=True, filters=filters)]

        ids = await anyio.to_thread.run_sync(listing)
        for container_id in ids:
            await self.remove(container_id)
        return len(ids)

    async def aclose(self) -> None:
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        while self._pool:
            await self._pool.popleft().aclose()
        if self._client is not None:
            await self.remove_all()
            self._client.close()
