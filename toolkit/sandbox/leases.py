"""Owner leases, for sandboxes of a replica that died without cleaning up (SIGKILL, OOM, node loss, or a successor
under another name).

Labels cannot change after create, so the heartbeat is a tiny *lease container* per owner
(`toolfleet.lease=<instance>`) whose pid 1 is a watchdog: `sh` reading stdin, exiting when the owner's attached
stream closes (the owner's process died: the kernel closes its socket) or when no heartbeat byte arrived for
`lease_s` (the owner hangs, or its engine connection is partitioned). The owner writes a byte every `lease_s / 3`.
A lease is live exactly while that container runs; the engine itself is the shared record, so this needs no clock
agreement, no shared disk and no extra service. Any live replica's janitor removes sandboxes whose owner's lease is
not running, and dead leases. A lease is created, attached and only then started: one a janitor finds not yet
started is a replica starting up, live for that round; still unstarted a round later, its owner died in between.

The same lease guards an instance name: a namesake's lease still running at start is waited on for `lease_s` (a
dead owner's lease ends by then), and if it still runs the server refuses to start rather than take a live
server's sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import structlog

from toolkit.sandbox.engine import Engine, SandboxError
from toolkit.sandbox.settings import DockerSandboxSettings
from toolkit.sandbox.specs import SandboxSpec
from toolkit.sandbox.stream import AttachedStream
from toolkit.wire import LEASE_LABEL, OWNER_LABEL, ROLE_LABEL

log = structlog.get_logger(__name__)

LEASE_ROLE = "lease"

_WATCHDOG = 'while [ -n "$(timeout {lease_s:g} head -c1)" ]; do :; done'
"""The lease container's pid 1: alive while heartbeat bytes keep coming on the attached stdin."""


LEASE_SLACK_S = 5.0
"""Beyond `lease_s`, what a namesake's lease is given to end (the engine's own delay in stopping it)."""


class OwnerLease:
    """One instance's owner lease (claimed, taken, renewed) and the janitor that removes what dead owners left."""

    def __init__(self, engine: Engine, settings: DockerSandboxSettings, *, instance: str, image: str) -> None:
        self.instance = instance
        self._engine = engine
        self._settings = settings
        self._image = image
        self._lease: AttachedStream | None = None
        self._unstarted: set[str] = set()
        """Leases the janitor's last round found created but not yet started (see the module docstring)."""

    async def claim(self) -> None:
        """Refuse to start while another server of this instance name lives (its lease runs): the sandboxes
        labelled with the name are its own, not leftovers. A namesake that died (a crash, a restart) has its
        lease end within `lease_s` of its last heartbeat, so that long (and a little more) is waited on."""
        leases = await anyio.to_thread.run_sync(self._engine.labelled, f"{LEASE_LABEL}={self.instance}")
        running = [c["Id"] for c in leases if c["State"] == "running"]
        if not running:
            return
        log.info("runtime.namesake_lease", instance=self.instance, leases=len(running))
        wait_s = self._settings.lease_s + LEASE_SLACK_S
        if not await anyio.to_thread.run_sync(self._engine.wait_stopped, running, wait_s):
            raise SandboxError(
                f"another live server holds instance {self.instance!r}: its owner lease (container "
                f"{running[0][:12]}) still runs after {wait_s:g} s, so its "
                "sandboxes are not leftovers; start this server with another --instance, or stop that one first"
            )

    async def take(self) -> None:
        spec = SandboxSpec(
            image=self._image,
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
        container_id, sock = await anyio.to_thread.run_sync(self._engine.create_attached, kwargs)
        self._lease = await AttachedStream.open(container_id, sock, 2**16)

    async def heartbeat(self) -> None:
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
                    await self.take()  # the new lease first: no moment without one for janitors to see
                except SandboxError as take_exc:
                    log.warning("lease.retake_failed", instance=self.instance, error=str(take_exc))
                    await asyncio.sleep(self._settings.lease_s / 3)
                    continue
                await self._engine.remove(old.container_id)

    async def janitor(self) -> None:
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
        orphans = await anyio.to_thread.run_sync(self._orphans)
        await self._engine.remove_each(orphans)
        return len(orphans)

    def _orphans(self) -> list[str]:
        """Blocking: the sandboxes of owners without a live lease, and the leases that ended."""
        # the sandboxes are listed before the leases: a lease outlives its sandboxes' create
        sandboxes = self._engine.labelled(OWNER_LABEL)
        leases = self._engine.labelled(LEASE_LABEL)
        starting = {c["Id"] for c in leases if c["State"] == "created"}
        held = [c for c in leases if c["State"] == "running" or c["Id"] in starting - self._unstarted]
        self._unstarted = starting
        live = {c["Labels"][LEASE_LABEL] for c in held} | {self.instance}
        dead = [c for c in sandboxes if c["Labels"].get(OWNER_LABEL) not in live]
        ended = [c for c in leases if c not in held and c["Labels"][LEASE_LABEL] != self.instance]
        return [c["Id"] for c in dead + ended]

    def close(self) -> None:
        if self._lease is not None:
            self._lease.close()
