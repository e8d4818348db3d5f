"""One container runtime for every tool that runs sandboxes (python's docker backend, the container tool).

What it owns, so no tool server repeats it:
- labels: `toolfleet.role=<role>` and `toolfleet.instance=<instance>` on every sandbox, plus
  `toolfleet.owner=<instance>` naming the owner lease the sandbox depends on;
- leftovers: at start an instance removes what an earlier process of the same name left, at stop
  everything it made; but never what a live process of the same name holds: a namesake's lease still
  running at start is waited on for `lease_s` (a dead owner's lease ends by then), and if it still runs
  this server refuses to start rather than take a live server's sandboxes;
- owner leases, for sandboxes of a replica that died without cleaning up (SIGKILL, OOM, node loss,
  or a successor under another name). Labels cannot change after create, so the heartbeat is a
  tiny *lease container* per owner (`toolfleet.lease=<instance>`) whose pid 1 is a watchdog:
  `sh` reading stdin, exiting when the owner's attached stream closes (the owner's process died:
  the kernel closes its socket) or when no heartbeat byte arrived for `lease_s` (the owner hangs,
  or its engine connection is partitioned). The owner writes a byte every `lease_s / 3`. A lease
  is live exactly while that container runs; the engine itself is the shared record, so this
  needs no clock agreement, no shared disk and no extra service. Any live replica's janitor
  removes sandboxes whose owner's lease is not running, and dead leases. A lease is created, attached
  and only then started: one a janitor finds not yet started is a replica starting up, live for that
  round; still unstarted a round later, its owner died in between;
- the warm pool, resource limits, the OCI runtime (`runc`, or gVisor's `runsc` where the engine
  has it configured) and the translation of Docker SDK errors where they enter.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import anyio
import docker
import docker.errors
import requests.exceptions
import structlog
from pydantic import Field

from toolkit.metrics import SANDBOX_STATES
from toolkit.settings import ToolServerSettings
from toolkit.wire import INSTANCE_LABEL, LEASE_LABEL, MEMORY_HEADER, OWNER_LABEL, ROLE_LABEL

log = structlog.get_logger(__name__)

LEASE_ROLE = "lease"

_WATCHDOG = 'while [ -n "$(timeout {lease_s:g} head -c1)" ]; do :; done'
"""The lease container's pid 1: alive while heartbeat bytes keep coming on the attached stdin."""


LEASE_SLACK_S = 5.0
"""Beyond `lease_s`, what a namesake's lease is given to end (the engine's own delay in stopping it)."""


RUNSC_TASKS_PER_PROCESS = 9
RUNSC_BASE_TASKS = 64
"""Under gVisor the sandbox's own host tasks count against the container's pids cgroup: its kernel's threads and
the gofer (about 50 when idle) and, on the ptrace platform, about 8 per guest process (measured here: 20 guest
processes added 166). A runc-sized limit (the lease's 8, python's 128) stops the sandbox itself from starting
("OCI runtime create failed") or kills it later, so under runsc the limit is scaled to mean guest processes."""


FLEET_RUNTIME_ENV = "TOOLFLEET_OCI_RUNTIME"
"""Where set (e.g. `runsc`), the OCI runtime of every sandbox tool that is not told otherwise."""


STARTING, WARM, HELD = SANDBOX_STATES
"""A sandbox's state in the census: being started, ready in the warm pool, or bound to a session."""


SAMPLE_THREADS = 8
"""Sandboxes whose memory is read at once: an engine under load takes up to a second per stats call."""


class SandboxError(Exception):
    """Our side broke (engine down, image missing): the call fails with an error result, the server lives on."""


class DockerSandboxSettings(ToolServerSettings):
    """Flags every docker-backed tool server shares (`--instance`, `--pool-size`, `--oci-runtime`, ...)."""

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

    @property
    def session_memory_cap_mb(self) -> int:
        return self.max_session_memory_mb or self.memory_mb

    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{self.port}"


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


class _Demux(asyncio.StreamReaderProtocol):
    """Docker's multiplexed attach stream (an 8-byte header - kind, size - before each frame), split as the bytes
    arrive: stdout frames go straight into the reader (or, once diverted, line by line to a callback), stderr
    frames are logged.

    Why in `data_received` rather than a task reading a raw reader: a reply then wakes its reader once, not
    once for the task and again for the reader it feeds (a loop turn per call on every warm sandbox call)."""

    def __init__(self, reader: asyncio.StreamReader, container_id: str, limit: int) -> None:
        super().__init__(reader)
        self._out = reader
        self._container_id = container_id
        self._limit = limit
        self._pending = bytearray()
        self._line = bytearray()
        self._link: asyncio.BaseTransport | None = None
        self.on_line: Callable[[bytes], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._link = transport

    def data_received(self, data: bytes) -> None:
        buf = self._pending
        buf += data
        start = 0
        while len(buf) - start >= 8:
            end = start + 8 + int.from_bytes(buf[start + 4 : start + 8], "big")
            if end > len(buf):
                break
            payload = bytes(buf[start + 8 : end])
            if buf[start] != 1:
                text = payload[:2000].decode("utf-8", "replace")
                log.warning("sandbox.stderr", container=self._container_id[:12], text=text)
            elif self.on_line is None:
                self._out.feed_data(payload)
            else:
                self._lines(payload, self.on_line)
            start = end
        del buf[:start]

    def _lines(self, payload: bytes, on_line: Callable[[bytes], None]) -> None:
        """Each whole line to `on_line`; a line longer than the limit ends the stream with an error (as the
        reader's `readline` would fail on it)."""
        line = self._line
        line += payload
        start = 0
        while (end := line.find(b"\n", start)) >= 0:
            on_line(bytes(line[start : end + 1]))
            start = end + 1
        del line[:start]
        if len(line) > self._limit:
            self._out.set_exception(ValueError(f"a line longer than {self._limit} bytes"))
            if self._link is not None:
                self._link.close()


class AttachedStream:
    """A started container's attached stdin/stdout: stdout frames feed `reader`, stderr frames are logged."""

    def __init__(
        self, container_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, demux: _Demux
    ) -> None:
        self.container_id = container_id
        self.reader = reader
        self.writer = writer
        self._demux = demux

    @classmethod
    async def open(cls, container_id: str, sock: socket.socket, limit: int) -> AttachedStream:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        transport, demux = await loop.create_connection(lambda: _Demux(reader, container_id, limit), sock=sock)
        return cls(container_id, reader, asyncio.StreamWriter(transport, demux, reader, loop), demux)

    def divert(self, on_line: Callable[[bytes], None]) -> None:
        """From now on hand each stdout line to `on_line` as it arrives, in the loop's callback, instead of
        the reader, which then sees only the stream's end (or the error that ended it).

        Why: a channel with many requests in flight otherwise needs a task that reads lines and hands each
        to its caller - one more loop turn on every reply. Call it only once nothing unread is left in the
        reader (after a ready line, before the first request)."""
        self._demux.on_line = on_line

    def close(self) -> None:
        self.writer.close()


class ContainerRuntime:
    """Creates, labels, leases and removes one instance's sandboxes of one role on a Docker engine."""

    def __init__(self, settings: DockerSandboxSettings, *, role: str, image: str) -> None:
        self.role = role
        self.image = image
        self.instance = settings.instance_name()
        self._settings = settings
        self._client: docker.DockerClient | None = None
        self._lease: AttachedStream | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._unstarted: set[str] = set()
        """Leases the janitor's last round found created but not yet started (see the module docstring)."""
        self._creating = 0
        """Sandboxes the engine is creating (they have no id yet)."""
        self._states: dict[str, str] = {}
        """Each live sandbox's census state, by container id."""
        self._limits: dict[str, int] = {}
        self._used: dict[str, int] = {}
        """Memory used by each sandbox at the last sample."""

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise SandboxError("the container runtime is not started")
        return self._client

    async def start(self) -> None:
        """Connect, check image and OCI runtime, make sure no live server holds this instance's name, remove
        its leftovers, take the lease."""
        self._client = await anyio.to_thread.run_sync(self._connect)
        try:
            await self._claim_instance()
        except BaseException:
            self._client.close()
            self._client = None
            raise
        stale = await self.remove_all()
        await self._take_lease()
        self._tasks = [asyncio.create_task(self._heartbeat()), asyncio.create_task(self._janitor())]
        log.info("runtime.ready", role=self.role, instance=self.instance, removed_stale=stale)

    def _connect(self) -> docker.DockerClient:
        url = self._settings.docker_url
        with docker_errors("cannot reach the Docker engine"):
            client = docker.DockerClient(base_url=url) if url else docker.from_env()
            client.ping()
        with docker_errors(f"image {self.image}"):
            client.images.get(self.image)
        runtime = self._settings.oci_runtime
        with docker_errors("cannot read the engine's OCI runtimes"):
            known = client.info().get("Runtimes") or {}
        if runtime not in known:
            client.close()
            raise SandboxError(
                f"OCI runtime {runtime!r} is not configured in the Docker engine (it has {', '.join(sorted(known))}); "
                "for gVisor install runsc and add it under `runtimes` in /etc/docker/daemon.json"
            )
        return client

    async def _claim_instance(self) -> None:
        """Refuse to start while another server of this instance name lives (its lease runs): the sandboxes
        labelled with the name are its own, not leftovers. A namesake that died (a crash, a restart) has its
        lease end within `lease_s` of its last heartbeat, so that long (and a little more) is waited on."""
        leases = await anyio.to_thread.run_sync(self._list, f"{LEASE_LABEL}={self.instance}")
        running = [c["Id"] for c in leases if c["State"] == "running"]
        if not running:
            return
        log.info("runtime.namesake_lease", instance=self.instance, leases=len(running))
        if not await anyio.to_thread.run_sync(self._wait_stopped, running, self._settings.lease_s + LEASE_SLACK_S):
            raise SandboxError(
                f"another live server holds instance {self.instance!r}: its owner lease (container "
                f"{running[0][:12]}) still runs after {self._settings.lease_s + LEASE_SLACK_S:g} s, so its "
                "sandboxes are not leftovers; start this server with another --instance, or stop that one first"
            )

    def _wait_stopped(self, container_ids: list[str], timeout_s: float) -> bool:
        """Blocking: whether every container stops (or is gone) within `timeout_s` (the engine tells, no polling)."""
        deadline = time.monotonic() + timeout_s
        for container_id in container_ids:
            try:
                self.client.api.wait(container_id, timeout=max(deadline - time.monotonic(), 0.1))
            except docker.errors.NotFound:
                continue  # removed meanwhile
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout):
                return False  # no answer in time (a unix socket's read timeout is a ConnectionError): it runs
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot wait on a lease container: {exc}") from exc
        return True

    def labels(self) -> dict[str, str]:
        return {ROLE_LABEL: self.role, INSTANCE_LABEL: self.instance, OWNER_LABEL: self.instance}

    def _create_attached(self, kwargs: dict[str, Any]) -> tuple[str, socket.socket]:
        """Blocking: create, attach before start (so no output is lost), start; removed again on failure."""
        kwargs = {"runtime": self._settings.oci_runtime, **kwargs}
        if kwargs["runtime"] == "runsc":
            kwargs["pids_limit"] = kwargs["pids_limit"] * RUNSC_TASKS_PER_PROCESS + RUNSC_BASE_TASKS
        with docker_errors("cannot start a sandbox container"):
            container = self.client.containers.create(**kwargs)
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

    async def start_attached(self, spec: SandboxSpec, *, limit: int) -> AttachedStream:
        """A new labelled sandbox, started, with its stdin/stdout attached; counted `starting` until `mark`ed."""
        kwargs = {**spec.kwargs(), "labels": self.labels()}
        self._creating += 1
        try:
            container_id, sock = await anyio.to_thread.run_sync(self._create_attached, kwargs)
        finally:
            self._creating -= 1
        self._states[container_id] = STARTING
        self._limits[container_id] = spec.memory_bytes
        try:
            return await AttachedStream.open(container_id, sock, limit)
        except BaseException:
            sock.close()
            await self.remove(container_id)
            raise

    async def exec(self, container_id: str, argv: list[str], *, user: str) -> tuple[int, bytes]:
        """Run argv in a running sandbox as `user` (`docker exec`); its exit code and stdout."""

        def run() -> tuple[int, bytes]:
            with docker_errors("cannot exec in the sandbox container"):
                api = self.client.api
                exec_id = api.exec_create(container_id, argv, stdout=True, stderr=False, user=user)["Id"]
                out = api.exec_start(exec_id)
                return int(api.exec_inspect(exec_id)["ExitCode"] or 0), out

        return await anyio.to_thread.run_sync(run)

    def mark(self, container_id: str, state: str) -> None:
        """Move a live sandbox to another census state (the warm pool says when one is ready or handed out)."""
        if container_id in self._states:
            self._states[container_id] = state

    def census(self) -> dict[str, int]:
        """How many of this instance's sandboxes are in each state."""
        counts = dict.fromkeys((STARTING, WARM, HELD), 0)
        counts[STARTING] += self._creating
        for state in self._states.values():
            counts[state] += 1
        return counts

    def memory_limit_bytes(self) -> int:
        return sum(self._limits.values())

    def memory_used_bytes(self) -> int:
        return sum(self._used.values())

    @property
    def samples_memory(self) -> bool:
        return self._settings.memory_sample_s > 0

    async def sample_memory_forever(self) -> None:
        """Read every live sandbox's memory use from the engine each `memory_sample_s` (a loop under `Loops`:
        one that died shows in /healthz); sandboxes the engine fails to answer for are logged and asked again."""
        limiter = anyio.CapacityLimiter(SAMPLE_THREADS)
        while True:
            await self._sample_round(limiter)
            await anyio.sleep(self._settings.memory_sample_s)

    async def _sample_round(self, limiter: anyio.CapacityLimiter) -> None:
        used: dict[str, int] = {}
        failures: list[str] = []

        async def sample(container_id: str) -> None:
            try:
                figure = await anyio.to_thread.run_sync(self._memory_of, container_id, limiter=limiter)
            except SandboxError as exc:
                failures.append(str(exc))
                return
            if figure is not None:
                used[container_id] = figure

        async with anyio.create_task_group() as tg:
            for container_id in list(self._states):
                tg.start_soon(sample, container_id)
        self._used = {cid: n for cid, n in used.items() if cid in self._states}  # none removed meanwhile
        if failures:
            log.warning("memory.sample_failed", sandboxes=len(failures), error=failures[0])

    def _memory_of(self, container_id: str) -> int | None:
        """Blocking: a container's memory use as `docker stats` shows it (the page cache it may drop is not
        counted); None for one removed meanwhile (the engine answers not found, or an empty body)."""
        with contextlib.suppress(docker.errors.NotFound, ValueError), docker_errors("cannot read sandbox memory"):
            memory = self.client.api.stats(container_id, stream=False, one_shot=True).get("memory_stats") or {}
            stats = memory.get("stats") or {}
            cache = stats.get("inactive_file", stats.get("total_inactive_file", 0))
            return max(int(memory.get("usage", 0)) - int(cache), 0)
        return None

    async def remove(self, container_id: str) -> None:
        self._states.pop(container_id, None)
        self._limits.pop(container_id, None)
        self._used.pop(container_id, None)

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound), docker_errors("cannot remove a sandbox container"):
                self.client.api.remove_container(container_id, force=True)

        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(remove)
            except SandboxError as exc:
                log.warning("container.remove_failed", container=container_id[:12], error=str(exc))

    def _list(self, *labels: str) -> list[dict[str, Any]]:
        with docker_errors("cannot list sandbox containers"):
            return self.client.api.containers(all=True, filters={"label": list(labels)})

    async def _remove_listed(self, listing: Callable[[], list[str]]) -> int:
        """Remove the containers `listing` names, all at once (a stop under gVisor takes ~1 s per container)."""
        ids = await anyio.to_thread.run_sync(listing)
        async with anyio.create_task_group() as group:
            for container_id in ids:
                group.start_soon(self.remove, container_id)
        return len(ids)

    async def remove_all(self) -> int:
        """Remove every container of this instance and its old leases (leftovers of a crash, or all at stop)."""

        def listing() -> list[str]:
            mine = self._list(f"{ROLE_LABEL}={self.role}", f"{INSTANCE_LABEL}={self.instance}")
            leases = self._list(f"{LEASE_LABEL}={self.instance}")
            return [c["Id"] for c in mine + leases]

        return await self._remove_listed(listing)

    async def _take_lease(self) -> None:
        spec = SandboxSpec(
            image=self.image,
            command=["sh", "-c", _WATCHDOG.format(lease_s=self._settings.lease_s)],
            user="65534:65534",
            workdir="/",
            writable=[],
            memory_bytes=32 * 2**20,
            cpus=0.1,
            pids=8,
            disk_bytes=0,
        )
        labels = {ROLE_LABEL: LEASE_ROLE, LEASE_LABEL: self.instance}
        # detach=False is how the SDK sets StdinOnce: the owner's attached stdin closing ends the watchdog
        kwargs = {**spec.kwargs(), "detach": False, "labels": labels}
        container_id, sock = await anyio.to_thread.run_sync(self._create_attached, kwargs)
        self._lease = await AttachedStream.open(container_id, sock, 2**16)

    async def _heartbeat(self) -> None:
        """Renew the lease every third of `lease_s`; a lease that died is taken again at once (its stream ends:
        the watchdog writes nothing), so janitors see this owner without one for as short a time as can be."""
        while True:
            assert self._lease is not None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.lease_s / 3):
                    await self._lease.reader.read(1)
            try:
                self._lease.writer.write(b"x")
                await self._lease.writer.drain()
                if self._lease.reader.at_eof():
                    raise ConnectionError("lease container exited")
            except (ConnectionError, OSError) as exc:
                log.warning("lease.lost", instance=self.instance, error=str(exc))
                old = self._lease
                old.close()
                try:
                    await self._take_lease()  # the new lease first: no moment without one for janitors to see
                except SandboxError as take_exc:
                    log.warning("lease.retake_failed", instance=self.instance, error=str(take_exc))
                    await asyncio.sleep(self._settings.lease_s / 3)
                    continue
                await self.remove(old.container_id)

    async def _janitor(self) -> None:
        while True:
            await asyncio.sleep(self._settings.janitor_interval_s)
            try:
                removed = await self.remove_orphans()
            except SandboxError as exc:
                log.warning("janitor.failed", error=str(exc))
                continue
            if removed:
                log.info("janitor.removed", containers=removed)

    async def remove_orphans(self) -> int:
        """Remove sandboxes (of any role) whose owner's lease is not running, and leases that ended."""

        def listing() -> list[str]:
            sandboxes = self._list(OWNER_LABEL)  # listed before the leases: a lease outlives its sandboxes' create
            leases = self._list(LEASE_LABEL)
            starting = {c["Id"] for c in leases if c["State"] == "created"}
            held = [c for c in leases if c["State"] == "running" or c["Id"] in starting - self._unstarted]
            self._unstarted = starting
            live = {c["Labels"][LEASE_LABEL] for c in held} | {self.instance}
            dead = [c for c in sandboxes if c["Labels"].get(OWNER_LABEL) not in live]
            ended = [c for c in leases if c not in held and c["Labels"][LEASE_LABEL] != self.instance]
            return [c["Id"] for c in dead + ended]

        return await self._remove_listed(listing)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._lease is not None:
            self._lease.close()
        if self._client is not None:
            await self.remove_all()
            self._client.close()


class Pooled(Protocol):
    container_id: str

    async def aclose(self) -> None: ...


P = TypeVar("P", bound=Pooled)

RETRY_S = 2.0
"""Pause before a failed refill of the pool is tried again (the engine is down, the image missing)."""


class WarmPool(Generic[P]):
    """Keeps `size` sandboxes ready so a new session starts at once.

    Refills one at a time; but while takers wait on an empty pool it starts up to `burst` at once, and a taker
    is handed the first sandbox to come up (one the refill started too) rather than waiting on a start of its
    own. It never starts more than its waiting takers and its refill need, so bursts stay within the session
    limit that bounds the takers; a sandbox whose taker gave up fills the pool, or is removed past its size."""

    def __init__(self, spawn: Callable[[], Awaitable[P]], size: int, runtime: ContainerRuntime, *, burst: int) -> None:
        self._spawn = spawn
        self._size = size
        self._runtime = runtime
        self._burst = burst
        self._ready: collections.deque[P] = collections.deque()
        self._takers: collections.deque[asyncio.Future[P]] = collections.deque()
        self._starting = 0
        self._starts: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._open = False

    def __len__(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        self._open = True
        self._top_up()

    async def take(self) -> P:
        """A ready sandbox when one is waiting, else the first one started to come up."""
        if not self._open:
            raise SandboxError("the sandbox pool is not running (the server is starting or shutting down)")
        if self._ready:
            item = self._ready.popleft()
            self._runtime.mark(item.container_id, HELD)
            self._top_up()
            return item
        taker: asyncio.Future[P] = asyncio.get_running_loop().create_future()
        self._takers.append(taker)
        self._top_up()
        try:
            return await taker
        except asyncio.CancelledError:
            if taker.done() and not taker.cancelled() and taker.exception() is None:
                self._deliver(taker.result())  # handed over as this taker was cancelled: keep it for the next
            with contextlib.suppress(ValueError):
                self._takers.remove(taker)
            raise

    async def fresh(self, spawn: Callable[[], Awaitable[P]]) -> P:
        """A sandbox of another kind than the pool's (another size), started for one taker."""
        item = await spawn()
        self._runtime.mark(item.container_id, HELD)
        return item

    def _waiting(self) -> int:
        return sum(not taker.done() for taker in self._takers)

    def _top_up(self) -> None:
        """Start what the waiting takers and the refill need: up to `burst` at once while takers wait, else one."""
        if not self._open:
            return
        waiting = self._waiting()
        needed = waiting + max(self._size - len(self._ready), 0)
        limit = self._burst if waiting else 1
        while self._starting < min(needed, limit):
            self._starting += 1
            task = asyncio.create_task(self._start_one())
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)

    async def _start_one(self) -> None:
        try:
            item = await self._spawn()
        except Exception as exc:
            self._starting -= 1
            log.warning("pool.start_failed", error=str(exc))
            if not self._fail_one(exc):
                await asyncio.sleep(RETRY_S)  # only a refill failed: back off before the next try
        else:
            self._starting -= 1
            self._deliver(item)
        self._top_up()

    def _next_taker(self) -> asyncio.Future[P] | None:
        """The oldest taker still waiting; those that gave up are dropped on the way."""
        while self._takers:
            taker = self._takers.popleft()
            if not taker.done():
                return taker
        return None

    def _fail_one(self, exc: Exception) -> bool:
        """The oldest waiting taker gets the failure (its session fails with it, as a start of its own would)."""
        if (taker := self._next_taker()) is None:
            return False
        taker.set_exception(exc)
        return True

    def _deliver(self, item: P) -> None:
        """Hand a new sandbox to the oldest waiting taker, else keep it warm, else (past the size) remove it."""
        if (taker := self._next_taker()) is not None:
            self._runtime.mark(item.container_id, HELD)
            taker.set_result(item)
            return
        if len(self._ready) < self._size and self._open:
            self._runtime.mark(item.container_id, WARM)
            self._ready.append(item)
            return
        task = asyncio.create_task(item.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self._open = False
        while self._fail_one(SandboxError("the server is shutting down")):
            pass
        for task in list(self._starts):
            task.cancel()
        for task in list(self._starts):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*self._closing)
        ready, self._ready = list(self._ready), collections.deque()
        await asyncio.gather(*(sandbox.aclose() for sandbox in ready))
