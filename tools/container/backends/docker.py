"""Docker backend: a container per session running the resident agent, on the kit's container runtime.

Each container: the image of `--image`, `--network none` unless a named network is configured,
the default user `--user` (non-root), read-only root with size-capped tmpfs at the workdir and
/tmp as the only writable paths, memory / CPU / pids limits, all capabilities dropped,
`no-new-privileges`, the engine's init as pid 1 (reaps what commands leave behind), the OCI
runtime of `--oci-runtime`, labelled and leased by `toolkit.sandbox` (role
`container-sandbox`), with a warm pool (`toolkit.sandbox.backend`, as python's docker backend).

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
import itertools
import json
from typing import Any

import anyio

from toolkit.sandbox.backend import AttachedSandbox, DockerSandboxes, wait_ready
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.sandbox.specs import SandboxSpec
from toolkit.sandbox.stream import AttachedStream
from tools.container.core import AGENT_SOURCE, DATA_DIR, READER_LIMIT, SandboxError, SandboxGone
from tools.container.settings import ContainerSettings

ROLE = "container-sandbox"
GRACE_S = 5.0
"""How long past a command's deadline the agent may take to answer before the container counts as lost."""


class AgentChannel:
    """JSON lines to and from the agent; many requests in flight, matched by id."""

    def __init__(self, stream: AttachedStream) -> None:
        self._stream = stream
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._watch: asyncio.Task[None] | None = None
        self._gone: str | None = None

    async def wait_ready(self, timeout_s: float) -> None:
        await wait_ready(self._stream.reader, timeout_s, who="the container's agent", error=SandboxError)
        self._stream.divert(self._on_line)
        self._watch = asyncio.create_task(self._until_end())

    def _on_line(self, line: bytes) -> None:
        """A reply, handed to its caller as it arrives (no reader task in between: one loop turn less a call)."""
        try:
            reply = json.loads(line)
            request_id = reply.get("id")
        except (ValueError, AttributeError) as exc:
            self._lose(f"lost the container's agent: {exc}")
            self._stream.close()
            return
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(reply)

    async def _until_end(self) -> None:
        """Wait for the stream to end (the diverted reader sees nothing else); then fail every caller."""
        try:
            await self._stream.reader.read()
            why = "the container stopped (out of memory, or removed)"
        except (ValueError, ConnectionError) as exc:
            why = f"lost the container's agent: {exc}"
        self._lose(why)

    def _lose(self, why: str) -> None:
        self._gone = self._gone or why
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
            # a timeout scope, not `wait_for`: that wraps the future and resumes a loop turn after the reply
            async with asyncio.timeout(timeout_s + GRACE_S):
                return await future
        except TimeoutError as exc:
            raise SandboxGone(f"the container's agent did not answer within {GRACE_S:g} s of the deadline") from exc
        except ConnectionError as exc:
            raise SandboxGone(f"lost the container's agent: {exc}") from exc
        finally:
            self._waiting.pop(request_id, None)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._stream.close()


class DockerSandbox(AttachedSandbox):
    def __init__(self, runtime: ContainerRuntime, stream: AttachedStream, default_user: str) -> None:
        super().__init__(runtime, stream)
        self.channel = AgentChannel(stream)
        self._default_user = default_user

    async def ready(self, timeout_s: float) -> None:
        await self.channel.wait_ready(timeout_s)

    async def request(self, payload: dict[str, Any], *, user: str | None, timeout_s: float) -> dict[str, Any]:
        if user is None or user == self._default_user:
            return await self.channel.request(payload, timeout_s)
        argv = ["python3", "-c", AGENT_SOURCE, "--once", json.dumps({**payload, "id": 0})]
        try:
            with anyio.fail_after(timeout_s + GRACE_S):
                code, out = await self.runtime.exec(self.container_id, argv, user=user)
        except TimeoutError as exc:
            raise SandboxGone(f"the command as {user} did not end within {GRACE_S:g} s of its deadline") from exc
        try:
            return json.loads(out)
        except ValueError as exc:
            text = out[:300].decode(errors="replace")
            raise SandboxError(f"running as {user} failed (exit {code}): {text or 'no output'}") from exc

    def close(self) -> None:
        self.channel.close()


class DockerBackend(DockerSandboxes[DockerSandbox]):
    noun = "container"

    def __init__(self, settings: ContainerSettings) -> None:
        self._user = settings.user
        spec = SandboxSpec(
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
        super().__init__(settings, role=ROLE, spec=spec, reader_limit=READER_LIMIT)

    def attach(self, stream: AttachedStream) -> DockerSandbox:
        return DockerSandbox(self.runtime, stream, self._user)
