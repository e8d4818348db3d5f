"""The MCP shell around the sandbox: the `python` tool, its instructions, bad-input handling."""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent
from openai_harmony import ToolNamespaceConfig

from toolkit.sandbox.file_tools import serve_files
from toolkit.server import HIDDEN, Faults, Reply, Sizing, ToolServer, backend_lifespan
from toolkit.signature import Op
from tools.python_sandbox.core import Backend, Kernel, KernelDied, SandboxError
from tools.python_sandbox.settings import PythonSandboxSettings

RUN = Faults(
    "sandbox",
    unavailable=(SandboxError,),
    lost=(KernelDied,),
    loses="variables and files",
    dies="the Python process",
    redo="Re-run earlier cells if needed",
    died_event="kernel.died",
)
"""A run whose interpreter died gets a fresh one (of the size the call asks for) and says so plainly."""
FILES = Faults("sandbox", unavailable=(SandboxError, KernelDied))
"""A file op on a dead interpreter leaves it be: the next run replaces it."""

_TIMEOUT = re.compile(r"time out after [0-9.]+ seconds")
_INTERNET = re.compile(r"Internet access for this session is [^.]*\.(?: Depends on the cluster\.)?")


def instructions(timeout_s: float) -> str:
    """Harmony's own python description (`ToolNamespaceConfig.python()`) with this server's facts put in.

    The library's text states a placeholder timeout and "Internet access ... UNKNOWN"; ours has a
    set timeout and no network. Where the library's wording changes, the facts are appended."""
    text = ToolNamespaceConfig.python().description
    timeout = f"time out after {timeout_s:g} seconds"
    internet = "Internet access for this session is disabled."
    text, timeouts = _TIMEOUT.subn(timeout, text)
    text, internets = _INTERNET.subn(internet, text)
    extra = ([] if timeouts else [f"Calls {timeout}."]) + ([] if internets else [internet])
    return " ".join([text.strip(), *extra])


def build_server(settings: PythonSandboxSettings, backend: Backend) -> ToolServer[Kernel]:
    mcp = MCPServer("python", instructions=settings.instructions(instructions(settings.timeout_s)))

    sizing = Sizing(settings.memory_mb, settings.session_memory_cap_mb, backend.new_kernel)
    kit: ToolServer[Kernel] = ToolServer(
        mcp,
        settings,
        backend.new_kernel,
        lifespan=backend_lifespan(backend),
        sizing=sizing,
        runtime=backend.runtime,
        keeper=settings.keeper("python"),
    )

    @kit.tool(
        "python",
        RUN,
        step="sandbox.run",
        meta=HIDDEN,
        description="Run Python code in this session's stateful sandbox.",
        runs_long=True,
    )
    def python(code: str) -> Op[Kernel, Reply]:
        if len(code) > settings.max_code_chars:
            raise ToolError(f"code is {len(code)} characters; the limit is {settings.max_code_chars}")
        return lambda kernel: _run(kernel, code, settings.timeout_s)

    serve_files(kit, FILES, lambda kernel, request: kernel.files(request))
    return kit


async def _run(kernel: Kernel, code: str, timeout_s: float) -> Reply:
    result = await kernel.run(code, timeout_s)
    images = [ImageContent(type="image", data=png, mime_type="image/png") for png in result.images]
    return Reply(result.render(timeout_s), more=images)
