"""The python tool's core, protocol-free: a `Backend` makes `Kernel`s; a kernel runs code, keeping state.

Backends (docker, local) differ only in how they start the sandboxed interpreter; both talk to
it over the same JSON-lines channel (`KernelChannel`), so they share the whole call path.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from toolkit.sandbox.backend import wait_ready
from toolkit.sandbox.engine import SandboxError as SandboxError  # the kit's "our side broke", raised by both backends
from toolkit.sandbox.file_tools import SnapshotFailed as SnapshotFailed  # the sandbox could not make or load one
from toolkit.sandbox.file_tools import program, pull_snapshot, push_snapshot
from toolkit.sandbox.runtime import ContainerRuntime

KERNEL_SOURCE = program(Path(__file__).with_name("kernel.py"))
READER_LIMIT = 64 * 1024 * 1024
"""Largest reply frame accepted from a kernel (capped text plus a few PNGs)."""
FILE_OP_TIMEOUT_S = 30.0  # one chunk of at most files.MAX_CHUNK bytes in or out of the work dir
SNAPSHOT_TIMEOUT_S = 120.0  # pickling or loading a whole session (hundreds of MiB) inside the sandbox


class KernelDied(Exception):
    """The interpreter is gone (killed for memory, crashed, or hung past its deadline)."""


@dataclass
class Limits:
    """What one session's sandbox may use."""

    timeout_s: float = 30.0
    memory_bytes: int = 1024 * 1024 * 1024
    cpus: float = 1.0
    pids: int = 128
    disk_bytes: int = 256 * 1024 * 1024
    max_output_chars: int = 20_000
    max_images: int = 4

    def kernel_config(self, *, workdir: str, capture_path: str, processes: int | None) -> str:
        return json.dumps(
            {
                "timeout_s": self.timeout_s,
                "max_output_chars": self.max_output_chars,
                "max_images": self.max_images,
                "memory_bytes": self.memory_bytes,
                "file_bytes": self.disk_bytes,
                "open_files": 256,
                "processes": processes,
                "workdir": workdir,
                "capture_path": capture_path,
            }
        )


@dataclass
class RunResult:
    output: str = ""
    result: str | None = None
    error: str | None = None
    images: list[str] = field(default_factory=list)
    timed_out: bool = False
    truncated: int = 0

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> RunResult:
        return cls(
            output=reply.get("output") or "",
            result=reply.get("result"),
            error=reply.get("error"),
            images=list(reply.get("images") or []),
            timed_out=bool(reply.get("timed_out")),
            truncated=int(reply.get("truncated") or 0),
        )

    def render(self, timeout_s: float) -> str:
        """The text the model reads: output, trailing value, traceback, and what a limit cut short."""
        parts = [p for p in (self.output, self.result, self.error) if p]
        if self.truncated:
            parts.append(f"[output truncated: {self.truncated} more characters were cut]")
        if self.timed_out:
            parts.append(f"[execution interrupted: timed out after {timeout_s:g} s; variables defined so far are kept]")
        text = "\n".join(p.rstrip("\n") for p in parts)
        return text if text else "[no output]"


class ChannelKernel:
    """A kernel reached over a `KernelChannel`; each backend adds how to free what carries it."""

    def __init__(self, channel: KernelChannel) -> None:
        self.channel = channel

    async def run(self, code: str, timeout_s: float) -> RunResult:
        return RunResult.from_reply(await self.channel.request({"code": code}, timeout_s))

    async def files(self, op: dict[str, Any]) -> dict[str, Any]:
        return await self.channel.request(op, FILE_OP_TIMEOUT_S)

    async def snapshot(self) -> tuple[bytes, list[str]]:
        """The session pickled inside the sandbox, as opaque bytes, and the names it could not pickle."""
        payload, head = await pull_snapshot(self._snapshot_op, {"op": "snapshot"})
        return payload, [str(name) for name in head["unsaved"]]

    async def restore(self, payload: bytes) -> list[str]:
        """Load `payload` inside the sandbox; the names of modules that did not import again are returned."""
        reply = await push_snapshot(self._snapshot_op, payload, {"op": "restore"})
        return [str(name) for name in reply["missing"]]

    async def _snapshot_op(self, op: dict[str, Any]) -> dict[str, Any]:
        return await self.channel.request(op, SNAPSHOT_TIMEOUT_S)


class Kernel(Protocol):
    """One session's resident interpreter; `files` moves a chunk in or out of its work dir, or lists it."""

    async def run(self, code: str, timeout_s: float) -> RunResult: ...
    async def files(self, op: dict[str, Any]) -> dict[str, Any]: ...
    async def snapshot(self) -> tuple[bytes, list[str]]: ...
    async def restore(self, payload: bytes) -> list[str]: ...
    async def aclose(self) -> None: ...


class Backend(Protocol):
    """Makes kernels; `start`/`aclose` bracket the server's life (pool, leftovers)."""

    name: str
    runtime: ContainerRuntime | None
    """The docker backends' runtime (their sandboxes are counted in /metrics); None elsewhere."""

    async def start(self) -> None: ...
    async def new_kernel(self, session_id: str, memory_mb: int | None = None) -> Kernel: ...
    async def aclose(self) -> None: ...


class KernelChannel:
    """JSON lines to and from a kernel process, one request in flight at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, grace_s: float = 5.0) -> None:
        self._reader = reader
        self._writer = writer
        self._grace_s = grace_s
        self._lock = asyncio.Lock()
        self._next_id = 0

    async def wait_ready(self, timeout_s: float) -> None:
        await wait_ready(self._reader, timeout_s, who="interpreter", error=KernelDied)

    async def request(self, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send code (or a file op); wait for the reply up to the timeout plus a grace period, else the kernel
        is dead."""
        async with self._lock:
            self._next_id += 1
            frame = {**body, "id": self._next_id, "timeout_s": timeout_s}
            try:
                self._writer.write(json.dumps(frame).encode() + b"\n")
                await self._writer.drain()
                async with asyncio.timeout(timeout_s + self._grace_s):
                    return await self._reply(self._next_id)
            except TimeoutError as exc:
                raise KernelDied(f"interpreter did not stop within {self._grace_s:g} s of its timeout") from exc
            except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
                raise KernelDied(f"lost the interpreter: {exc}") from exc

    async def _reply(self, request_id: int) -> dict[str, Any]:
        """The reply to `request_id`; replies to earlier calls that the client cancelled are skipped."""
        while True:
            line = await self._reader.readline()
            if not line:
                raise KernelDied("the interpreter exited (out of memory or killed)")
            reply = json.loads(line)
            if reply.get("id") == request_id:
                return reply
            if not isinstance(reply.get("id"), int) or reply["id"] > request_id:
                raise KernelDied("the interpreter answered out of turn")

    def close(self) -> None:
        self._writer.close()
