"""One container runtime for every tool that runs sandboxes (python's docker backend, the container tool).

What it owns, so no tool server repeats it:
- labels: `toolfleet.role=<role>` and `toolfleet.instance=<instance>` on every sandbox, plus
  `toolfleet.owner=<instance>` naming the owner lease the sandbox depends on (`toolkit.sandbox.leases`);
- leftovers: at start an instance removes what an earlier process of the same name left, at stop
  everything it made; but never what a live process of the same name holds (the lease's claim);
- the census of its sandboxes (starting, warm, held) and their memory, for /metrics.
The warm pool is `toolkit.sandbox.pool`, the engine's calls and errors `toolkit.sandbox.engine`.
"""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import structlog

from toolkit.metrics import SANDBOX_STATES
from toolkit.sandbox.engine import Engine, SandboxError
from toolkit.sandbox.leases import OwnerLease
from toolkit.sandbox.settings import DockerSandboxSettings
from toolkit.sandbox.specs import SandboxSpec
from toolkit.sandbox.stream import AttachedStream
from toolkit.wire import INSTANCE_LABEL, LEASE_LABEL, OWNER_LABEL, ROLE_LABEL

log = structlog.get_logger(__name__)

STARTING, WARM, HELD = SANDBOX_STATES
"""A sandbox's state in the census: being started, ready in the warm pool, or bound to a session."""


SAMPLE_THREADS = 8
"""Sandboxes whose memory is read at once: an engine under load takes up to a second per stats call."""


class ContainerRuntime:
    """Creates, labels, leases and removes one instance's sandboxes of one role on a Docker engine."""

    def __init__(self, settings: DockerSandboxSettings, *, role: str, image: str) -> None:
        self.role = role
        self.image = image
        self.instance = settings.instance_name()
        self._settings = settings
        self.engine = Engine(settings)
        self.lease = OwnerLease(self.engine, settings, instance=self.instance, image=image)
        self._tasks: list[asyncio.Task[None]] = []
        self._creating = 0
        """Sandboxes the engine is creating (they have no id yet)."""
        self._states: dict[str, str] = {}
        """Each live sandbox's census state, by container id."""
        self._limits: dict[str, int] = {}
        self._used: dict[str, int] = {}
        """Memory used by each sandbox at the last sample."""

    async def start(self) -> None:
        """Connect, check image and OCI runtime, make sure no live server holds this instance's name, remove
        its leftovers, take the lease."""
        await anyio.to_thread.run_sync(self.engine.connect, self.image)
        try:
            await self.lease.claim()
        except BaseException:
            self.engine.close()
            raise
        stale = await self.remove_all()
        await self.lease.take()
        self._tasks = [asyncio.create_task(self.lease.heartbeat()), asyncio.create_task(self.lease.janitor())]
        log.info("runtime.ready", role=self.role, instance=self.instance, removed_stale=stale)

    def labels(self) -> dict[str, str]:
        return {ROLE_LABEL: self.role, INSTANCE_LABEL: self.instance, OWNER_LABEL: self.instance}

    async def start_attached(self, spec: SandboxSpec, *, limit: int) -> AttachedStream:
        """A new labelled sandbox, started, with its stdin/stdout attached; counted `starting` until `mark`ed."""
        kwargs = {**spec.kwargs(), "labels": self.labels()}
        self._creating += 1
        try:
            container_id, sock = await anyio.to_thread.run_sync(self.engine.create_attached, kwargs)
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
        return await anyio.to_thread.run_sync(self.engine.exec, container_id, argv, user)

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

    def memory_of_sandbox(self, container_id: str) -> int | None:
        """One sandbox's memory use at the last sample; None: not sampled (yet, or the engine did not say)."""
        return self._used.get(container_id)

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
                figure = await anyio.to_thread.run_sync(self.engine.memory_of, container_id, limiter=limiter)
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

    def _forget(self, container_id: str) -> None:
        self._states.pop(container_id, None)
        self._limits.pop(container_id, None)
        self._used.pop(container_id, None)

    async def remove(self, container_id: str) -> None:
        self._forget(container_id)
        await self.engine.remove(container_id)

    async def remove_all(self) -> int:
        """Remove every container of this instance and its old leases (leftovers of a crash, or all at stop)."""

        def listing() -> list[str]:
            mine = self.engine.labelled(f"{ROLE_LABEL}={self.role}", f"{INSTANCE_LABEL}={self.instance}")
            leases = self.engine.labelled(f"{LEASE_LABEL}={self.instance}")
            return [c["Id"] for c in mine + leases]

        ids = await anyio.to_thread.run_sync(listing)
        for container_id in ids:
            self._forget(container_id)
        await self.engine.remove_each(ids)
        return len(ids)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.lease.close()
        if self.engine.connected:
            await self.remove_all()
            self.engine.close()
