"""Local backend: each session's interpreter in a bubblewrap sandbox, for hosts without a Docker engine.

No network (own net namespace), own pid namespace with the kernel as pid 1, the host's /usr
read-only and nothing else of the host visible, size-capped tmpfs for /mnt/data and /tmp,
no capabilities, rlimits for memory / file size / processes. When the server runs as root each
session also gets its own unprivileged host uid, so process limits are per session.

cloudpickle (snapshots are pickled inside the sandbox) is the tool server's own pure-python package, bound
read-only at `/opt/toolfleet/site/cloudpickle` with that folder on the sandbox's PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import shutil
import signal
from collections.abc import Callable

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

SITE = "/opt/toolfleet/site"
"""Where the sandbox finds the tool server's cloudpickle (read-only)."""


def cloudpickle_binds() -> list[str]:
    """bwrap arguments that show the server's cloudpickle package inside the sandbox; none where it is missing
    (a snapshot then fails inside the sandbox and says so)."""
    spec = importlib.util.find_spec("cloudpickle")
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = next(iter(spec.submodule_search_locations))
    return ["--ro-bind", folder, f"{SITE}/cloudpickle", "--setenv", "PYTHONPATH", SITE]


class LocalKernel(ChannelKernel):
    def __init__(
        self, proc: asyncio.subprocess.Process, channel: KernelChannel, release_uid: Callable[[], None]
    ) -> None:
        super().__init__(channel)
        self._proc = proc
        self._release_uid = release_uid

    async def aclose(self) -> None:
        self.channel.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        await self._proc.wait()
        self._release_uid()


class LocalBackend:
    name = "local"
    runtime = None

    def __init__(self, settings: PythonSandboxSettings) -> None:
        self._settings = settings
        self._limits = settings.limits()
        self._bwrap = shutil.which("bwrap")
        self._as_root = os.geteuid() == 0
        self._binds = cloudpickle_binds()
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
        return [*argv, *self._binds, self._settings.local_python, "-u", "-c", KERNEL_SOURCE, config]

    async def new_kernel(self, session_id: str, memory_mb: int | None = None) -> LocalKernel:
        """A kernel under bubblewrap; `memory_mb` (another size than `--memory-mb`) sets its address-space rlimit.

        Its uid and process are released on every way out but a ready kernel, a caller that left (cancelled)
        while it started included: a leaked uid is gone for good, and with the last one every new session fails."""
        uid = self._take_uid()
        try:
            proc = await self._spawn(uid, memory_mb)
        except BaseException:
            self._give_uid(uid)  # asyncio kills a process whose start was cancelled; its uid is ours to return
            raise
        assert proc.stdin and proc.stdout and proc.stderr
        kernel = LocalKernel(proc, KernelChannel(proc.stdout, proc.stdin), lambda: self._give_uid(uid))
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

    async def aclose(self) -> None:
        """Kernels are closed by the session registry; nothing is shared to free here."""
