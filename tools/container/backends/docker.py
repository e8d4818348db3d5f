"""Docker backend: a container per session running the resident agent, on the kit's container runtime.

Each container: the image of `--image`, `--network none` unless a named network is configured,
the default user `--user` (non-root), read-only root with size-capped tmpfs at the workdir and
/tmp as the only writable paths, memory / CPU / pids limits, all capabilities dropped,
`no-new-privileges`, the engine's init as pid 1 (reaps what commands leave behind), the OCI
runtime of `--oci-runtime`, labelled and leased by `toolfleet.containers` (role
`container-sandbox`), with a warm pool.

Why a resident agent rather than `docker exec` per command: an exec is three engine calls
(create, start with attach, inspect), measured here at tens of milliseconds per command
(`bench/container.py` prints it beside the agent); a request line on the container's already
attached stdin costs one write and one read. Commands as another allowed `user` do go through
`docker exec --user` (the agent, run once), because the agent has no capability to switch users.

Plan for a Kubernetes backend (not built): the same `Backend` / `Sandbox` pair in
`backends/kubernetes.py`, registered as `kubernetes`. `new_sandbox` creates a Pod per session
(image, `securityContext`: runAsNonRoot, readOnlyRootFilesystem, allowPrivilegeEscalation false,
capabilities drop ALL, seccomp RuntimeDefault; `emptyDir` (sizeLimit) for the workdir and /tmp;
resources.limits for memory / CPU, the pids limit from the kubelet; `runtimeClassName` for gVisor;
a NetworkPolicy denying all egress instead of `--network none`; `stdin: true` and the agent as
command), waits until Running, and attaches to its stdin/stdout through the `pods/attach`
websocket, carrying the same JSON lines as here. Another `user` goes through `pods/exec`. Labels
are the same keys; the owner lease becomes a `coordination.k8s.io` Lease per replica, renewed by
the owner, and the janitor deletes Pods whose owner's Lease expired. A warm pool is a set of
unassigned Pods. The server, the core and the agent stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
from typing import Any

import anyio
import structlog

from toolkit.containers import AttachedStream, ContainerRuntime, SandboxSpec, WarmPool
from tools.container.core import AGENT_SOURCE, DATA_DIR, READER_LIMIT, SandboxError, SandboxGone
from tools.container.settings import ContainerSettings

log = structlog.get_logger(__name__)

ROLE = "container-sandbox"
GRACE_S = 5.0
"""How long past a command's deadline the agent may take to answer before the container counts as lost."""


class AgentChannel:
    """JSON lines to and from the agent; many requests in flight, matched by id."""

    def __init__(self, stream: AttachedStream) -> None:
        self._stream = stream
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._gone: str | None = None

    async def wait_ready(self, timeout_s: float) -> None:
        try:
            line = await asyncio.wait_for(self._stream.reader.readline(), timeout_s)
        except TimeoutError as exc:
            raise SandboxError(f"the container's agent did not start within {timeout_s:g} s") from exc
        if not line.startswith(b'{"ready"'):
            raise SandboxError(f"the container's agent failed to start: {line[:500].decode(errors='replace')!r}")
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while line := await self._stream.reader.readline():
                reply = json.loads(line)
                future = self._waiting.pop(reply.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(reply)
            self._gone = "the container stopped (out of memory, or removed)"
        except (ValueError, ConnectionError) as exc:
            self._gone = f"lost the container's agent: {exc}"
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(SandboxGone(self._gone))
        self._waiting.clear()

    async def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self._gone:
            raise SandboxGone(self._gone)
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            self._stream.writer.write(json.dumps({**payload, "id": request_id}).encode() + b"\n")
            await self._stream.writer.drain()
            return await asyncio.wait_for(future, timeout_s + GRACE_S)
        except TimeoutError as exc:
            raise SandboxGone(f"the container's agent did not answer within {GRACE_S:g} s of the deadline") from exc
        except ConnectionError as exc:
            raise SandboxGone(f"lost the container's agent: {exc}") from exc
        finally:
            self._waiting.pop(request_id, None)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._stream.close()


class DockerSandbox:
    def __init__(self, runtime: ContainerRuntime, stream: AttachedStream, default_user: str) -> None:
        self._runtime = runtime
        self.container_id = stream.container_id
        self.channel = AgentChannel(stream)
        self._default_user = default_user

    async def request(self, payload: dict[str, Any], *, user: str | None, timeout_s: float) -> dict[str, Any]:
        if user is None or user == self._default_user:
            return await self.channel.request(payload, timeout_s)
        argv = ["python3", "-c", AGENT_SOURCE, "--once", json.dumps({**payload, "id": 0})]
        try:
            with anyio.fail_after(timeout_s + GRACE_S):
                code, out = await self._runtime.exec(self.container_id, argv, user=user)
        except TimeoutError as exc:
            raise SandboxGone(f"the command as {user} did not end within {GRACE_S:g} s of its deadline") from exc
        try:
            return json.loads(out)
        except ValueError as exc:
            text = out[:300].decode(errors="replace")
            raise SandboxError(f"running as {user} failed (exit {code}): {text or 'no output'}") from exc

    async def aclose(self) -> None:
        self.channel.close()
        await self._runtime.remove(self.container_id)


class DockerBackend:
    name = "docker"

    def __init__(self, settings: ContainerSettings) -> None:
        self.image = settings.image
        self._settings = settings
        self._spec = SandboxSpec(
            image=settings.image,
            command=["python3", "-u", "-c", AGENT_SOURCE],
            user=settings.user,
            workdir=settings.workdir,
            writable=[settings.workdir, "/tmp", DATA_DIR],  # DATA_DIR: a platform container's files
            memory_bytes=settings.memory_mb * 2**20,
            cpus=settings.cpus,
            pids=settings.pids,
            disk_bytes=settings.disk_mb * 2**20,
            env={"HOME": settings.workdir, "LANG": "C.UTF-8"},
            network=settings.network,
            tmpfs_mode="1777",  # other allowed users may work there too
            tmpfs_exec=True,  # scripts, pip-installed tools and builds run from the workdir
            init=True,
        )
        self.runtime = ContainerRuntime(settings, role=ROLE, image=settings.image)
        self._pool: WarmPool[DockerSandbox] = WarmPool(
            lambda: self._spawn(self._spec), settings.pool_size, self.runtime, burst=settings.pool_burst
        )

    async def start(self) -> None:
        await self.runtime.start()
        self._pool.start()

    async def _spawn(self, spec: SandboxSpec) -> DockerSandbox:
        stream = await self.runtime.start_attached(spec, limit=READER_LIMIT)
        sandbox = DockerSandbox(self.runtime, stream, self._settings.user)
        try:
            await sandbox.channel.wait_ready(timeout_s=30)
        except BaseException:
            await sandbox.aclose()
            raise
        return sandbox

    async def new_sandbox(self, session_id: str, memory_mb: int | None = None) -> DockerSandbox:
        """A warm sandbox from the pool; a fresh one of `memory_mb` for another size than the pool's (as the
        python tool does, so both tools size a platform container's sandbox the same way)."""
        if memory_mb is not None:
            spec = dataclasses.replace(self._spec, memory_bytes=memory_mb * 2**20)
            sandbox = await self._pool.fresh(lambda: self._spawn(spec))
            log.info("container.sized", session_id=session_id, container=sandbox.container_id[:12], memory_mb=memory_mb)
            return sandbox
        sandbox = await self._pool.take()
        log.info(
            "container.assigned", session_id=session_id, container=sandbox.container_id[:12], pooled=len(self._pool)
        )
        return sandbox

    async def aclose(self) -> None:
        await self._pool.aclose()
        with contextlib.suppress(SandboxError):
            await self.runtime.aclose()
