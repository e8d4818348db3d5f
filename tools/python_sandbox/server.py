"""The MCP shell around the sandbox: the `python` tool, its instructions, bad-input handling."""

from __future__ import annotations

import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent

from toolkit.server import HIDDEN, ToolServer, backend_lifespan
from tools.python_sandbox.core import Backend, Kernel, KernelDied, RunResult, SandboxError
from tools.python_sandbox.settings import PythonSandboxSettings

log = structlog.get_logger(__name__)

INSTRUCTIONS = """\
Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. \
This tool should be used for internal reasoning, but not for code that is intended to be visible to the user \
(e.g. when creating plots, tables, or files).
When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook \
environment. python will respond with the output of the execution or time out after {timeout:g} seconds. \
The drive at '/mnt/data' can be used to save and persist user files. Internet access for this session is disabled."""


def build_server(settings: PythonSandboxSettings, backend: Backend) -> ToolServer[Kernel]:
    mcp = MCPServer("python", instructions=INSTRUCTIONS.format(timeout=settings.timeout_s))

    kit: ToolServer[Kernel] = ToolServer(mcp, settings, backend.new_kernel, lifespan=backend_lifespan(backend))

    @mcp.tool(
        name="python",
        meta=HIDDEN,
        description="Run Python code in this session's stateful sandbox.",
        structured_output=False,
    )
    async def python(code: str, ctx: Context) -> list[TextContent | ImageContent]:
        if len(code) > settings.max_code_chars:
            raise ToolError(f"code is {len(code)} characters; the limit is {settings.max_code_chars}")
        try:
            async with kit.session(ctx, "python") as (key, kernel):
                result = await _run(kit, key, kernel, code, settings.timeout_s)
        except SandboxError as exc:
            raise ToolError(f"sandbox unavailable: {exc}") from exc
        content: list[TextContent | ImageContent] = [TextContent(type="text", text=result.render(settings.timeout_s))]
        content += [ImageContent(type="image", data=png, mime_type="image/png") for png in result.images]
        return content

    return kit


async def _run(kit: ToolServer[Kernel], key: str, kernel: Kernel, code: str, timeout_s: float) -> RunResult:
    """Run the code; if the interpreter died, give the session a fresh one and say so plainly."""
    try:
        return await kernel.run(code, timeout_s)
    except KernelDied as exc:
        log.warning("kernel.died", reason=str(exc))
        try:
            await kit.sessions.replace(key, await kit.sessions.factory(key))
        except SandboxError as start_exc:
            await kit.sessions.close(key)
            raise ToolError(f"the Python process died ({exc}) and a new one could not start: {start_exc}") from exc
        return RunResult(
            notice=f"[the Python process died ({exc}); the session was reset: "
            "all variables and files are lost. Re-run earlier cells if needed]"
        )
