"""Pooled Docker sandboxes whose main process speaks JSON lines over the container's attached stdin/stdout.

Both Docker backends (python's kernel, the container tool's agent) run a sandbox the same way: start a
container from a `SandboxSpec` on the kit's `ContainerRuntime`, attach to its stdin/stdout, wait for the
process's `{"ready"...}` line, keep a `WarmPool` of them, and start a fresh one for a session that asks for
another memory size. That is this module; a backend says only what differs: the spec (image, command, user,
writable paths), how its sandbox talks on the stream, and the words of its log events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Generic, TypeVar

import structlog

from toolkit.sandbox.engine import SandboxError
from toolkit.sandbox.pool import WarmPool
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sandbox.settings import DockerSandboxSettings
from toolkit.sandbox.specs import SandboxSpec
from toolkit.sandbox.stream import AttachedStream

log = structlog.get_logger(__name__)

READY_S = 30.0
"""How long a new sandbox's process may take to say it is ready."""


async def wait_ready(reader: asyncio.StreamReader, timeout_s: float, *, who: str, error: type[Exception]) -> None:
    """Wait for the `{"ready"...}` line a sandbox's process writes first; anything else (or nothing in time)
    is `error`, naming `who` ("interpreter", "the container's agent")."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except TimeoutError as exc:
        raise error(f"{who} did not start within {timeout_s:g} s") from exc
    if not line.startswith(b'{"ready"'):
        raise error(f"{who} failed to start: {line[:500].decode(errors='replace')!r}")


class AttachedSandbox:
    """One sandbox container reached over its attached stream; freed with the container."""

    def __init__(self, runtime: ContainerRuntime, stream: AttachedStream) -> None:
        self.runtime = runtime
        self.stream = stream
        self.container_id = stream.container_id

    async def ready(self, timeout_s: float) -> None:
        """Return once the sandbox's process answers; raise (a `SandboxError`) if it never will."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop talking to the sandbox (a subclass stops its reader too)."""
        self.stream.close()

    async def aclose(self) -> None:
        self.close()
        await self.runtime.remove(self.container_id)


A = TypeVar("A", bound=AttachedSandbox)


class DockerSandboxes(Generic[A]):
    """A Docker backend's sandboxes: the runtime, a warm pool of the default size, and `new_sandbox` for a
    session. A subclass gives `attach` (its sandbox on a stream) and, where a size is set as the process
    starts, `sized`."""

    name = "docker"
    noun = "sandbox"
    """The subject of the `<noun>.assigned` / `<noun>.sized` log events."""

    def __init__(self, settings: DockerSandboxSettings, *, role: str, spec: SandboxSpec, reader_limit: int) -> None:
        self.image = spec.image
        self.runtime = ContainerRuntime(settings, role=role, image=spec.image)
        self._spec = spec
        self._reader_limit = reader_limit
        self._pool: WarmPool[A] = WarmPool(
            lambda: self._spawn(self._spec), settings.pool_size, self.runtime, burst=settings.pool_burst
        )

    def attach(self, stream: AttachedStream) -> A:
        raise NotImplementedError

    def sized(self, memory_mb: int) -> SandboxSpec:
        """The spec of a sandbox of `memory_mb` MiB."""
        return dataclasses.replace(self._spec, memory_bytes=memory_mb * 2**20)

    async def start(self) -> None:
        await self.runtime.start()
        self._pool.start()

    async def _spawn(self, spec: SandboxSpec) -> A:
        sandbox = self.attach(await self.runtime.start_attached(spec, limit=self._reader_limit))
        try:
            await sandbox.ready(timeout_s=READY_S)
        except BaseException:
            await sandbox.aclose()
            raise
        return sandbox

    async def new_sandbox(self, session_id: str, memory_mb: int | None = None) -> A:
        """A warm sandbox from the pool when one is ready, else the first to start; a fresh one of `memory_mb`
        for another size than the pool's (so every Docker tool sizes a session's sandbox the same way)."""
        if memory_mb is not None:
            spec = self.sized(memory_mb)
            sandbox = await self._pool.fresh(lambda: self._spawn(spec))
            log.info(
                f"{self.noun}.sized", session_id=session_id, container=sandbox.container_id[:12], memory_mb=memory_mb
            )
            return sandbox
        sandbox = await self._pool.take()
        log.info(
            f"{self.noun}.assigned", session_id=session_id, container=sandbox.container_id[:12], pooled=len(self._pool)
        )
        return sandbox

    async def aclose(self) -> None:
        await self._pool.aclose()
        with contextlib.suppress(SandboxError):
            await self.runtime.aclose()
