"""The MCP shell around the container sessions: `exec`, the kit's hidden file tools, instructions, bad input."""

from __future__ import annotations

import functools

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from toolkit.sandbox.file_tools import serve_files
from toolkit.server import Faults, Reply, Sizing, ToolServer, backend_lifespan
from toolkit.signature import Op
from tools.container.core import Backend, ContainerSession, SandboxError, SandboxGone, UsageError
from tools.container.settings import ContainerSettings

FAULTS = Faults("container", usage=(UsageError,), unavailable=(SandboxError,), gone=(SandboxGone,))
STEP = "sandbox.exec"

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
    mcp = MCPServer("container", instructions=_instructions(settings, backend.image))
    new_session = functools.partial(_new_session, settings, backend)
    kit: ToolServer[ContainerSession] = ToolServer(
        mcp,
        settings,
        new_session,
        lifespan=backend_lifespan(backend),
        progress_interval_s=settings.progress_s,
        sizing=Sizing(settings.memory_mb, settings.session_memory_cap_mb, new_session),
        runtime=backend.runtime,
        keeper=settings.keeper("container"),
    )
    tool = functools.partial(kit.tool, faults=FAULTS, step=STEP)

    @tool("exec", description="Run a command in this conversation's container.", runs_long=True)
    def exec_(
        cmd: list[str],
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        session_name: str | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> Op[ContainerSession, Reply]:
        limit, notes = _time_limit(timeout, settings)
        _check_exec(cmd, env, user, settings)

        async def run(s: ContainerSession) -> Reply:
            done = await s.exec(cmd, timeout_s=limit, workdir=workdir, env=env, session_name=session_name, user=user)
            done.notes += notes
            return Reply(done.render(), done.structured())

        return run

    serve_files(kit, FAULTS, lambda s, request: s.files(request), step=STEP)
    return kit


def _instructions(settings: ContainerSettings, image: str) -> str:
    return INSTRUCTIONS.format(
        image=image,
        workdir=settings.workdir,
        timeout=settings.timeout_s,
        max_timeout=settings.max_timeout_s,
        network=_network_line(settings.network),
    )


async def _new_session(
    settings: ContainerSettings, backend: Backend, key: str, memory_mb: int | None = None
) -> ContainerSession:
    return ContainerSession(
        await backend.new_sandbox(key, memory_mb),
        workdir=settings.workdir,
        max_output_bytes=settings.max_output_bytes,
    )


def _time_limit(timeout: float | None, settings: ContainerSettings) -> tuple[float, list[str]]:
    if timeout is None:
        return settings.timeout_s, []
    if timeout <= 0:
        raise ToolError("timeout must be a positive number of seconds")
    if timeout > settings.max_timeout_s:
        return settings.max_timeout_s, [f"[timeout capped at {settings.max_timeout_s:g} s]"]
    return timeout, []


def _check_exec(cmd: list[str], env: dict[str, str] | None, user: str | None, settings: ContainerSettings) -> None:
    if not cmd or not cmd[0]:
        raise ToolError('cmd must be a non-empty list of arguments, e.g. ["bash", "-lc", "ls"]')
    if any("\0" in part for part in cmd):
        raise ToolError("cmd arguments may not contain NUL characters")
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ToolError(f"env name {key!r} is not a valid variable name")
    users = {settings.user, *settings.allowed_users}
    if user is not None and user not in users:
        raise ToolError(f"user {user!r} is not allowed here; allowed: {', '.join(sorted(users))}")
