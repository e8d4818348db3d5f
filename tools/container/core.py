"""The container tool's core, protocol-free: a session's container plus its named shells.

A `Backend` makes one `Sandbox` per session (a container running the agent of `agent.py`); a
`ContainerSession` keeps, per `session_name`, the shell's working directory, the exported
variables its scripts changed and the functions they defined, and sends each command to the sandbox
with them. In a named shell every command runs in the shell (an argv list quoted with `shlex.join`), so
`["cd", "/tmp"]` moves that shell; the unnamed one runs an argv list as a plain process, keeping state
only from explicit shell scripts (`["bash", "-lc", "..."]`). With `--snapshots`, a session is `Snapshottable`:
its files and its shells' state are packed and unpacked inside the container (`agent.take_snapshot`), and the
server takes the shells' state back only after checking its shape (a snapshot is untrusted data).

Result layout (what `content[0].text` holds; stable, tests pin it):

    <stdout>
    [stderr]
    <stderr>
    [exit code N]      or   [timed out after T s: the command and every process it started were killed]
    [notes]            e.g. timeout capped, background processes stopped

Empty parts are left out; output cut in the middle carries `[... N bytes cut here ...]` at the cut.
"""

from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import TypeAdapter

from toolkit.sandbox.engine import SandboxError as SandboxError  # the kit's "our side broke"
from toolkit.sandbox.file_tools import SnapshotFailed as SnapshotFailed  # the sandbox could not make or load one
from toolkit.sandbox.file_tools import program, pull_snapshot, push_snapshot
from toolkit.sandbox.files import ROOT
from toolkit.sandbox.runtime import ContainerRuntime

AGENT_SOURCE = program(Path(__file__).with_name("agent.py"))
READER_LIMIT = 16 * 1024 * 1024
"""Largest reply line accepted from an agent (two capped streams, or one file chunk as base64)."""
DATA_DIR = ROOT  # where a platform container's files are (shell with container_reference), as in the python tool
FILE_OP_TIMEOUT_S = 30.0  # one chunk of at most files.MAX_CHUNK bytes in or out of /mnt/data
SNAPSHOT_TIMEOUT_S = 120.0  # packing or unpacking a whole session's files (hundreds of MiB) inside the container
NEVER_SAVED = ("files under /tmp", "shell variables that were not exported")
"""What a snapshot never holds: /tmp is scratch space, and a shell lives only as long as its command (only its
exported environment, cwd and functions reach the server)."""
NAMED_AT_MOST = 10  # paths named in a restore notice; the rest are counted


class UsageError(Exception):
    """The caller asked for something this tool refuses (bad path, forbidden user): an error result."""


class SandboxGone(Exception):
    """The session's container stopped (its agent was killed, or the container removed)."""


class Sandbox(Protocol):
    """One session's container: answers agent requests, as the default user or as another allowed one."""

    async def request(self, payload: dict[str, Any], *, user: str | None, timeout_s: float) -> dict[str, Any]: ...
    async def aclose(self) -> None: ...


class Backend(Protocol):
    """Makes sandboxes; `start`/`aclose` bracket the server's life (pool, leftovers, leases)."""

    name: str
    runtime: ContainerRuntime | None
    """The docker backends' runtime (their sandboxes are counted in /metrics); None elsewhere."""
    image: str

    async def start(self) -> None: ...
    async def new_sandbox(self, session_id: str, memory_mb: int | None = None) -> Sandbox: ...
    async def aclose(self) -> None: ...


@dataclass
class ExecResult:
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = 0
    timed_out: bool = False
    truncated: bool = False
    timeout_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.timed_out:
            parts.append(
                f"[timed out after {self.timeout_s:g} s: the command and every process it started were killed]"
            )
        else:
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts + self.notes)

    def structured(self) -> dict[str, Any]:
        keys = ("stdout", "stderr", "exit_code", "timed_out", "truncated")
        return {k: getattr(self, k) for k in keys}


@dataclass
class Shell:
    """A shell: where it stands, the variables its scripts exported or unset (None = unset), its functions."""

    cwd: str
    env: dict[str, str | None] = field(default_factory=dict)
    functions: str = ""


SHELLS: TypeAdapter[dict[str, Shell]] = TypeAdapter(dict[str, Shell])
"""The shells' state a restore hands back from inside the container: checked before it is kept."""


class ContainerSession:
    """One session: its sandbox and its shells; commands go to the sandbox with the shell's state."""

    def __init__(self, sandbox: Sandbox, *, workdir: str, max_output_bytes: int) -> None:
        self.sandbox = sandbox
        self._workdir = workdir
        self._max_output = max_output_bytes
        self.shells: dict[str, Shell] = {}

    async def exec(
        self,
        cmd: list[str],
        *,
        timeout_s: float,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        session_name: str | None = None,
        user: str | None = None,
    ) -> ExecResult:
        shell = self.shells.setdefault(session_name or "", Shell(self._workdir))
        cwd = posixpath.normpath(posixpath.join(shell.cwd, workdir)) if workdir else shell.cwd
        payload = {
            "op": "exec",
            "argv": cmd,
            "cwd": cwd,
            "env": {**shell.env, **(env or {})},
            "timeout_s": timeout_s,
            "max_bytes": self._max_output,
            "in_shell": bool(session_name),  # a named shell runs every command in the shell, as a terminal would
            "functions": shell.functions,
        }
        reply = await self.sandbox.request(payload, user=user, timeout_s=timeout_s)
        if "error" in reply:
            if reply.get("exit_code") is None:
                raise UsageError(reply["error"])
            return ExecResult(stderr=reply["error"] + "\n", exit_code=int(reply["exit_code"]))
        shell.env.update(reply.get("env_changes") or {})
        if "functions" in reply:
            shell.functions = reply["functions"]
        if reply.get("cwd"):
            shell.cwd = reply["cwd"]
        result = ExecResult(
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            exit_code=None if reply["timed_out"] else int(reply["exit_code"]),
            timed_out=bool(reply["timed_out"]),
            truncated=bool(reply["truncated"]),
            timeout_s=timeout_s,
        )
        if reply.get("stopped_background"):
            result.notes.append(
                f"[{reply['stopped_background']} background process(es) still held the output open when the command "
                "ended and were stopped; redirect their output (cmd > log 2>&1 &) to keep them running]"
            )
        return result

    async def files(self, request: dict[str, Any]) -> dict[str, Any]:
        """A file request (`toolkit.sandbox.files`) answered by the agent, as the default user."""
        return await self.sandbox.request(request, user=None, timeout_s=FILE_OP_TIMEOUT_S)

    async def snapshot(self) -> tuple[bytes, list[str]]:
        """/mnt/data, the work dir and the shells' state, packed inside the container (`agent.take_snapshot`) as
        opaque bytes; what it left out (links, devices, files this user cannot read) and what no snapshot holds."""
        shells = {name: dataclasses.asdict(shell) for name, shell in self.shells.items()}
        ask = {"op": "snapshot", "workdir": self._workdir, "shells": shells}
        payload, head = await pull_snapshot(self._snapshot_op, ask)
        return payload, [*_few([str(path) for path in head["unsaved"]]), *NEVER_SAVED]

    async def restore(self, payload: bytes) -> list[str]:
        """Unpack `payload` inside the container and take its shells back; a shell whose directory did not come
        back (under /tmp, say) starts in the work dir again, and is named."""
        reply = await push_snapshot(self._snapshot_op, payload, {"op": "restore", "workdir": self._workdir})
        self.shells = SHELLS.validate_python(reply["shells"])
        moved = [name for name in map(str, reply["gone"]) if name in self.shells]
        for name in moved:
            self.shells[name].cwd = self._workdir
        return [f"the directory of shell {name!r}" if name else "the directory of the unnamed shell" for name in moved]

    async def _snapshot_op(self, op: dict[str, Any]) -> dict[str, Any]:
        return await self.sandbox.request(op, user=None, timeout_s=SNAPSHOT_TIMEOUT_S)

    async def aclose(self) -> None:
        await self.sandbox.aclose()


def _few(paths: list[str]) -> list[str]:
    """At most NAMED_AT_MOST paths, then how many more."""
    if len(paths) <= NAMED_AT_MOST:
        return paths
    return [*paths[:NAMED_AT_MOST], f"{len(paths) - NAMED_AT_MOST} more paths"]
