"""The MCP shell around the container sessions: `exec`, the hidden file tools, instructions, bad input."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from toolkit.server import HIDDEN, Sizing, ToolServer, backend_lifespan
from toolkit.tracing import span
from tools.container.core import (
    DATA_DIR,
    Backend,
    ContainerSession,
    ExecResult,
    SandboxError,
    SandboxGone,
    UsageError,
)
from tools.container.settings import ContainerSettings

log = structlog.get_logger(__name__)
T = TypeVar("T")

INSTRUCTIONS = """\
Use `exec` to run shell commands in a Linux container that belongs to this conversation. \
The container runs the image {image}; it keeps its files, the packages you install and anything \
you leave running for the whole conversation, and it starts in {workdir}, which is writable (as is /tmp); \
the rest of the file system is read-only. Pass `cmd` as a list of arguments, for example \
["bash", "-lc", "ls -la"]. Each `session_name` is its own persistent shell: a command given with a \
`session_name` runs in that shell (an argument list is quoted safely), so `cd`, `export` and shell \
functions stay with it and never reach another name. Without `session_name`, an argument list runs as \
a plain program (no shell), and only a `cd` or `export` in a bash or sh script carries over. \
A command runs at most {timeout:g} s unless you give `timeout` (seconds, \
at most {max_timeout:g}); then it and every process it started are stopped. Long output is cut in the middle. \
{network}"""


def _network_line(network: str) -> str:
    if network == "none":
        return "The container has no network access: installing packages from the internet will not work."
    return f"The container is attached to the network {network!r}."


def build_server(settings: ContainerSettings, backend: Backend) -> ToolServer[ContainerSession]:
    instructions = INSTRUCTIONS.format(
        image=backend.image,
        workdir=settings.workdir,
        timeout=settings.timeout_s,
        max_timeout=settings.max_timeout_s,
        network=_network_line(settings.network),
    )
    mcp = MCPServer("container", instructions=instructions)

    async def new_session(key: str, memory_mb: int | None = None) -> ContainerSession:
        return ContainerSession(
            await backend.new_sandbox(key, memory_mb),
            workdir=settings.workdir,
            max_output_bytes=settings.max_output_bytes,
            max_file_bytes=settings.max_file_bytes,
        )

    kit: ToolServer[ContainerSession] = ToolServer(
        mcp,
        settings,
        new_session,
        lifespan=backend_lifespan(backend),
        progress_interval_s=settings.progress_s,
        sizing=Sizing(settings.memory_mb, settings.session_memory_cap_mb, new_session),
        runtime=backend.runtime,
    )
    users = {settings.user, *settings.allowed_users}

    async def in_session(
        ctx: Context, tool: str, handle: str | None, work: Callable[[ContainerSession, str], Awaitable[T]]
    ) -> T:
        """Run `work` on the caller's session (with its key); our failures and the caller's misuse become error
        results."""
        try:
            async with kit.session(ctx, tool, handle) as (key, session):
                try:
                    with span("sandbox.exec", namespace="container", tool=tool, session_id=key):
                        return await work(session, key)
                except SandboxGone as exc:
                    await kit.sessions.close(key)
                    raise ToolError(f"{exc}; its files are lost and the next call starts a fresh container") from exc
        except UsageError as exc:
            raise ToolError(str(exc)) from exc
        except SandboxError as exc:
            raise ToolError(f"container unavailable: {exc}") from exc

    @mcp.tool(name="exec", description="Run a command in this conversation's container.", structured_output=False)
    async def exec_(
        cmd: list[str],
        ctx: Context,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        session_name: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (the argument set vLLM's gpt-oss path sends)
        user: str | None = None,
        session_handle: str | None = None,
    ) -> CallToolResult:
        timeout_s, notes = _time_limit(timeout, settings)
        _check_exec(cmd, env, user, users)

        async def run(s: ContainerSession, key: str) -> tuple[ExecResult, str, str]:
            done = await s.exec(
                cmd, timeout_s=timeout_s, workdir=workdir, env=env, session_name=session_name, user=user
            )
            return done, kit.notice(key), key

        result, notice, key = await in_session(ctx, "exec", session_handle, run)
        result.notes += notes
        return CallToolResult(
            content=[TextContent(type="text", text=notice + result.render())],
            structured_content=kit.structured(key, result.structured()),
        )

    @mcp.tool(name="write_file", meta=HIDDEN, description="Write a file (or a chunk at offset) in the container.")
    async def write_file(
        path: str,
        content: str,
        ctx: Context,
        encoding: str = "text",
        offset: int = 0,
        session_handle: str | None = None,
    ) -> dict[str, Any]:
        return await in_session(
            ctx, "write_file", session_handle, lambda s, _: s.write_file(path, content, encoding, offset)
        )

    @mcp.tool(name="read_file", meta=HIDDEN, description="Read a file (from offset) in the container, text or base64.")
    async def read_file(
        path: str, ctx: Context, max_bytes: int | None = None, offset: int = 0, session_handle: str | None = None
    ) -> dict[str, Any]:
        return await in_session(ctx, "read_file", session_handle, lambda s, _: s.read_file(path, max_bytes, offset))

    @mcp.tool(name="list_files", meta=HIDDEN, description="The regular files under a directory: path, size, mtime_ns.")
    async def list_files(ctx: Context, path: str = DATA_DIR, session_handle: str | None = None) -> dict[str, Any]:
        return await in_session(ctx, "list_files", session_handle, lambda s, _: s.list_files(path))

    return kit


def _time_limit(timeout: float | None, settings: ContainerSettings) -> tuple[float, list[str]]:
    if timeout is None:
        return settings.timeout_s, []
    if timeout <= 0:
        raise ToolError("timeout must be a positive number of seconds")
    if timeout > settings.max_timeout_s:
        return settings.max_timeout_s, [f"[timeout capped at {settings.max_timeout_s:g} s]"]
    return timeout, []


def _check_exec(cmd: list[str], env: dict[str, str] | None, user: str | None, users: set[str]) -> None:
    if not cmd or not cmd[0]:
        raise ToolError('cmd must be a non-empty list of arguments, e.g. ["bash", "-lc", "ls"]')
    if any("\0" in part for part in cmd):
        raise ToolError("cmd arguments may not contain NUL characters")
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ToolError(f"env name {key!r} is not a valid variable name")
    if user is not None and user not in users:
        raise ToolError(f"user {user!r} is not allowed here; allowed: {', '.join(sorted(users))}")
