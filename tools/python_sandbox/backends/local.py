"""Local backend: each session's interpreter in a bubblewrap sandbox, for hosts without a Docker engine.

No network (own net namespace), own pid namespace with the kernel as pid 1, the host's /usr
read-only and nothing else of the host visible, size-capped tmpfs for /mnt/data and /tmp,
no capabilities, rlimits for memory / file size / processes. When the server runs as root each
session also gets its own unprivileged host uid, so process limits are per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import select
import shutil
import signal
import time
from collections.abc import Awaitable, Callable

import anyio
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

_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/mnt/data",
    "LANG": "C.UTF-8",
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_END_S = 10.0
"""How long the processes of a closed sandbox's uid get to die after SIGKILL before the uid is withheld."""


def _live_pidfds(uid: int) -> list[int]:
    """A pidfd for each live process whose real uid is `uid` (a zombie is dead: it waits on its parent to reap it).

    The uid is read again once the pidfd is open, so a pid reused meanwhile by another process is never taken."""
    fds = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not _lives_as(name, uid):
            continue
        try:
            fd = os.pidfd_open(int(name))
        except OSError:  # gone since the look
            continue
        if _lives_as(name, uid):
            fds.append(fd)
        else:
            os.close(fd)
    return fds


def _lives_as(pid: str, uid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return False
    return fields["Uid"].split()[0] == str(uid) and fields["State"].split()[0] not in ("Z", "X")


def end_processes_of(uid: int, timeout_s: float) -> bool:
    """SIGKILL every process of `uid` and wait until none lives; False when some outlive `timeout_s`.

    Each look kills what it finds and waits for those to exit; a child forked before its parent was killed is
    found by the next look, and a killed process forks no more, so a look that finds none ends it."""
    deadline = time.monotonic() + timeout_s
    while fds := _live_pidfds(uid):
        try:
            poller = select.poll()
            for fd in fds:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                poller.register(fd, select.POLLIN)  # readable once the process has exited
            waiting = set(fds)
            while waiting:
                left_ms = (deadline - time.monotonic()) * 1000
                if left_ms <= 0:
                    return False
                for fd, _ in poller.poll(left_ms):
                    poller.unregister(fd)
                    waiting.discard(fd)
        finally:
            for fd in fds:
                os.close(fd)
    return True


class LocalKernel(ChannelKernel):
    def __init__(
        self, proc: asyncio.subprocess.Process, channel: KernelChannel, release_uid: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(channel)
        self._proc = proc
        self._release_uid = release_uid

    async def aclose(self) -> None:
        self.channel.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        await self._proc.wait()
        await self._release_uid()


class LocalBackend:
    name = "local"
    runtime = None

    def __init__(self, settings: PythonSandboxSettings) -> None:
        self._settings = settings
        self._limits = settings.limits()
        self._bwrap = shutil.which("bwrap")
        self._as_root = os.geteuid() == 0
        self._free_uids = list(range(settings.local_uid_base + settings.max_sessions, settings.local_uid_base, -1))

    async def start(self) -> None:
        if self._bwrap is None:
            raise SandboxError("the local python backend needs bubblewrap: apt-get install bubblewrap")
        if not os.access(self._settings.local_python, os.X_OK):
            raise SandboxError(f"local interpreter {self._settings.local_python} is not executable")
        probe = await self.new_kernel("startup-probe")
        await probe.aclose()
        log.info("backend.ready", backend=self.name, per_session_uid=self._as_root)

    def _argv(self, config: str) -> list[str]:
        size = str(self._limits.disk_bytes)
        argv = [
            self._bwrap or "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--size",
            size,
            "--tmpfs",
            "/mnt/data",
            "--chdir",
            "/mnt/data",
            "--hostname",
            "sandbox",
            "--cap-drop",
            "ALL",
            "--clearenv",
        ]
        for key, value in _ENV.items():
            argv += ["--setenv", key, value]
        return [*argv, self._settings.local_python, "-u", "-c", KERNEL_SOURCE, config]

    async def new_kernel(self, session_id: str, memory_mb: int | None = None) -> LocalKernel:
        """A kernel under bubblewrap; `memory_mb` (another size than `--memory-mb`) sets its address-space rlimit.

        Its uid and process are released on every way out but a ready kernel, a caller that left (cancelled)
        while it started included: a leaked uid is gone for good, and with the last one every new session fails.
        The spawn is shielded so that a started process always reaches `LocalKernel.aclose`, the one way out that
        ends all of it (asyncio, cancelled mid-spawn, would kill the launcher alone)."""
        uid = self._take_uid()
        try:
            with anyio.CancelScope(shield=True):
                proc = await self._spawn(uid, memory_mb)
        except BaseException:
            self._give_uid(uid)  # nothing ran as the uid: the launcher never started
            raise
        assert proc.stdin and proc.stdout and proc.stderr
        kernel = LocalKernel(proc, KernelChannel(proc.stdout, proc.stdin), lambda: self._release_uid(uid))
        try:
            await kernel.channel.wait_ready(timeout_s=30)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                detail = await self._why_it_died(proc) if isinstance(exc, KernelDied) else ""
                await kernel.aclose()
            if isinstance(exc, KernelDied):
                raise SandboxError(f"{exc}{': ' + detail if detail else ''}") from exc
            raise
        return kernel

    async def _spawn(self, uid: int | None, memory_mb: int | None) -> asyncio.subprocess.Process:
        lim = self._limits if memory_mb is None else dataclasses.replace(self._limits, memory_bytes=memory_mb * 2**20)
        config = lim.kernel_config(
            workdir="/mnt/data", capture_path="/tmp/.toolfleet-output", processes=lim.pids if uid else None
        )
        # setpriv, not `user=`/`group=`: event loops such as uvloop refuse those arguments.
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if uid else []
        try:
            return await asyncio.create_subprocess_exec(
                *drop,
                *self._argv(config),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=READER_LIMIT,
            )
        except OSError as exc:
            raise SandboxError(f"could not start bubblewrap: {exc}") from exc

    @staticmethod
    async def _why_it_died(proc: asyncio.subprocess.Process) -> str:
        """What an interpreter that exited before it was ready wrote to stderr (bubblewrap's own refusals)."""
        if proc.returncode is None or proc.stderr is None:
            return ""
        return (await proc.stderr.read(4000)).decode(errors="replace").strip()

    def _take_uid(self) -> int | None:
        if not self._as_root:
            return None
        if not self._free_uids:
            raise SandboxError("no free sandbox uid (max_sessions reached)")
        return self._free_uids.pop()

    def _give_uid(self, uid: int | None) -> None:
        if uid is not None:
            self._free_uids.append(uid)

    async def _release_uid(self, uid: int | None) -> None:
        """Give a closed sandbox's uid back once no process of it lives, for the next session must share nothing.

        Killing bubblewrap's launcher and its process group is not enough. The sandbox's first process (its pid 1)
        waits for the launcher's go-ahead on an eventfd, forever if the launcher is gone, and it leaves the group
        (setsid) and asks to die with the launcher (PR_SET_PDEATHSIG) only after its setup, just before it runs
        the interpreter: a launcher killed alone (as asyncio does to a spawn cancelled mid-way), or killed while
        that first process was between its setsid and its prctl, left a process of the uid for good. So every
        process of the uid is killed, and the uid goes back once none lives; one that outlives SIGKILL (stuck in
        the kernel) keeps its uid out of the pool rather than share it with the next session."""
        if uid is None:
            return
        if await anyio.to_thread.run_sync(end_processes_of, uid, _END_S):
            self._give_uid(uid)
        else:
            log.error("sandbox.uid_withheld", uid=uid, reason=f"its processes outlived SIGKILL by {_END_S:g} s")

    async def aclose(self) -> None:
        """Kernels are closed by the session registry; nothing is shared to free here."""
