"""The sandbox file contract on the host side: the hidden MCP file tools every sandbox tool server serves,
and the program that ships the in-sandbox half (`files.py`) into a sandbox.

Both the python tool and the container tool move a platform container's files with the same three hidden
tools (not in the model's prompt), so the orchestrator has one adapter for both:
`write_file{path, data, offset}` -> `{size}`, `read_file{path, offset, max_bytes}` -> `{data, size, eof}`
and `list_files{}` -> `{files}`, paths under `/mnt/data`, bytes as base64 (the rules: `files.py`). The
server checks the sizes before any sandbox is taken; the sandbox checks the paths, where the files are.

A snapshot's bytes travel the same way, in chunks (`pull_snapshot`, `push_snapshot`: the host half of
`files.Transfer`); the server only carries them, never opens them.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from toolkit.sandbox import files
from toolkit.server import HIDDEN, Faults, ToolServer
from toolkit.sessions import SessionState
from toolkit.signature import Op

S = TypeVar("S", bound=SessionState)
Send = Callable[[S, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Hands one file request (`files.answer`'s) to a session's sandbox and returns the sandbox's reply."""

Request = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Sends one request to a sandbox and returns its reply."""

_MODULE = files.__name__
_BASE64_MAX = files.MAX_CHUNK * 4 // 3 + 4


def program(main: Path) -> str:
    """The source a sandbox's `python3 -c` runs: `files.py` installed under its own module name, then `main`
    (the kernel or the agent), which imports it as it does in the tree. Both are sent as source, so an image
    needs nothing of ours."""
    source = Path(files.__file__).read_text()
    return (
        "import sys as _sys, types as _types\n"
        f"_files = _types.ModuleType({_MODULE!r})\n"
        f"exec(compile({source!r}, {_MODULE!r}, 'exec'), _files.__dict__)\n"
        f"_sys.modules[{_MODULE!r}] = _files\n"
        "del _sys, _types, _files\n"
        f"exec(compile({main.read_text()!r}, {main.name!r}, 'exec'))\n"
    )


def serve_files(kit: ToolServer[S], faults: Faults, send: Send[S], step: str | None = None) -> None:
    """Register the hidden `write_file`, `read_file` and `list_files` tools on a sandbox tool server."""

    @kit.tool("write_file", faults, step=step, meta=HIDDEN, description="Write base64 bytes at an offset of a file.")
    def write_file(path: str, data: str, offset: int = 0) -> Op[S, dict[str, Any]]:
        if len(data) > _BASE64_MAX or offset < 0:
            raise ToolError(f"a chunk holds at most {files.MAX_CHUNK} bytes (base64), at an offset >= 0")
        return _op({"op": "write", "path": path, "data": data, "offset": offset}, send)

    @kit.tool(
        "read_file",
        faults,
        step=step,
        meta=HIDDEN,
        reads=True,
        description="Read up to max_bytes of a file, as base64.",
    )
    def read_file(path: str, offset: int = 0, max_bytes: int = files.MAX_CHUNK) -> Op[S, dict[str, Any]]:
        if not 0 < max_bytes <= files.MAX_CHUNK or offset < 0:
            raise ToolError(f"max_bytes must be in 1..{files.MAX_CHUNK}, offset >= 0")
        return _op({"op": "read", "path": path, "offset": offset, "max_bytes": max_bytes}, send)

    @kit.tool(
        "list_files",
        faults,
        step=step,
        meta=HIDDEN,
        reads=True,
        description="The files under /mnt/data: path, size, mtime_ns.",
    )
    def list_files() -> Op[S, dict[str, Any]]:
        return _op({"op": "list"}, send)


def _op(request: dict[str, Any], send: Send[S]) -> Op[S, dict[str, Any]]:
    """The request on the session's sandbox; a refused path or a failed op is an error result."""

    async def run(state: S) -> dict[str, Any]:
        reply = await send(state, request)
        if reply.get("error"):
            raise ToolError(reply["error"])
        return {k: v for k, v in reply.items() if k not in ("id", "error")}

    return run


class SnapshotFailed(Exception):
    """The sandbox could not make or load a snapshot (a library missing there, a snapshot it cannot read)."""


async def pull_snapshot(request: Request, ask: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The snapshot the sandbox makes for `ask` (a `snapshot` op), as opaque bytes, and its first reply
    (`unsaved`: what it left out)."""
    head = await _snapshot_op(request, ask)
    size, data = int(head["size"]), bytearray()
    while len(data) < size:
        chunk = base64.b64decode((await _snapshot_op(request, {"op": "snapshot_read", "offset": len(data)}))["data"])
        if not chunk:
            raise SnapshotFailed("the sandbox's snapshot ended early")
        data += chunk
    return bytes(data), head


async def push_snapshot(request: Request, payload: bytes, finish: dict[str, Any]) -> dict[str, Any]:
    """Hand `payload` to the sandbox in chunks, then `finish` (a `restore` op) loads it there; its reply."""
    for start in range(0, len(payload), files.SNAPSHOT_CHUNK):
        data = base64.b64encode(payload[start : start + files.SNAPSHOT_CHUNK]).decode("ascii")
        await _snapshot_op(request, {"op": "restore_write", "data": data})
    return await _snapshot_op(request, finish)


async def _snapshot_op(request: Request, op: dict[str, Any]) -> dict[str, Any]:
    reply = await request(op)
    if reply.get("error"):
        raise SnapshotFailed(str(reply["error"]))
    return reply
