"""An upstream shaped for the MCP conformance suite's server scenarios (`conformance server --url`).

Usage: python tests/gateway/conformance_server.py --port 0     (prints `READY <port>`; serves `/mcp`)
The suite is run against this server directly and through the gateway; the scores must match.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import socket
import sys
from typing import Annotated

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit.tasks import Tasks, TaskStore, ask, escalate
from toolkit.wire import INSTANCE_HEADER

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc000000301"
        "0100c9fe92ef0000000049454e44ae426082"
    )
).decode()
_WAV_HEADER = b"WAVEfmt " + bytes([16, 0, 0, 0, 1, 0, 1, 0, 64, 31, 0, 0, 64, 31, 0, 0, 1, 0, 8, 0])
WAV = base64.b64encode(b"RIFF" + (36).to_bytes(4, "little") + _WAV_HEADER + b"data" + bytes(4)).decode()


class UserInfo(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


class Defaults(BaseModel):
    name: str = "John Doe"
    age: int = 30
    score: float = 95.5
    status: str = Field(default="active", json_schema_extra={"enum": ["active", "inactive", "pending"]})
    verified: bool = True


INSTANCE = "c0f0c0f0c0f0c0f0"
"""The instance id of this server's task ids (`toolkit.wire.seal_task`)."""
TASK_TOOLS = ("slow_compute", "protocol_error_job", "confirm_delete", "multi_input")
REQUIRED_TASK_TOOLS = ("failing_job", "test_tool_with_task")
GATHERING_TASK_TOOLS = ("test_tool_with_task",)


class UserName(BaseModel):
    name: str = Field(description="Your name")


def _asked_name() -> Elicit[UserName]:
    return Elicit("What is your name?", UserName)


def _form(message: str, **fields: str) -> dict[str, object]:
    """An `elicitation/create` form asking for the boolean or string `fields`."""
    properties = {name: {"type": kind} for name, kind in fields.items()}
    return {"mode": "form", "message": message, "requestedSchema": {"type": "object", "properties": properties}}


def build(store: TaskStore) -> MCPServer:
    tasks = Tasks(store, long=TASK_TOOLS, required=REQUIRED_TASK_TOOLS, gathering=GATHERING_TASK_TOOLS)
    mcp = MCPServer("conformance-fixture", version="1.0.0", extensions=[tasks])
    _task_fixtures(mcp)

    @mcp.tool()
    def test_simple_text() -> str:
        """Returns simple text."""
        return "This is a simple text response for testing."

    @mcp.tool()
    def test_image_content() -> list[types.ImageContent]:
        """Returns an image."""
        return [types.ImageContent(type="image", data=PNG, mime_type="image/png")]

    @mcp.tool()
    def test_audio_content() -> list[types.AudioContent]:
        """Returns audio."""
        return [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]

    def _embedded() -> types.EmbeddedResource:
        res = types.TextResourceContents(uri="test://embedded-resource", mime_type="text/plain", text="Embedded.")
        return types.EmbeddedResource(type="resource", resource=res)

    @mcp.tool()
    def test_embedded_resource() -> list[types.EmbeddedResource]:
        """Returns an embedded resource."""
        return [_embedded()]

    @mcp.tool()
    def test_multiple_content_types() -> list[types.TextContent | types.ImageContent | types.EmbeddedResource]:
        """Returns text, an image and a resource."""
        return [
            types.TextContent(type="text", text="Multiple content types test:"),
            types.ImageContent(type="image", data=PNG, mime_type="image/png"),
            _embedded(),
        ]

    @mcp.tool()
    async def test_tool_with_logging(ctx: Context) -> str:
        """Logs three messages with delays."""
        for text in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.info(text)
            await asyncio.sleep(0.05)
        return "Tool with logging executed successfully"

    @mcp.tool()
    def test_error_handling() -> str:
        """Always fails."""
        raise RuntimeError("This tool intentionally returns an error for testing")

    @mcp.tool()
    async def test_tool_with_progress(ctx: Context) -> str:
        """Reports progress 0, 50, 100."""
        for value in (0, 50, 100):
            await ctx.report_progress(value, 100, f"at {value}")
            await asyncio.sleep(0.05)
        return "Tool with progress executed successfully"

    @mcp.tool()
    async def test_sampling(prompt: str, ctx: Context) -> str:
        """Asks the client's model."""
        msg = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
        result = await ctx.session.create_message([msg], max_tokens=100, related_request_id=ctx.request_id)
        text = result.content.text if isinstance(result.content, types.TextContent) else str(result.content)
        return f"LLM response: {text}"

    @mcp.tool()
    async def test_elicitation(message: str, ctx: Context) -> str:
        """Asks the user."""
        result = await ctx.elicit(message, UserInfo)
        return f"User response: action={result.action}, content={result.data.model_dump() if result.data else {}}"

    @mcp.tool()
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        """Asks with defaults for every primitive type."""
        result = await ctx.elicit("Please review and update the form fields with defaults", Defaults)
        return (
            f"Elicitation completed: action={result.action}, content={result.data.model_dump() if result.data else {}}"
        )

    @mcp.tool()
    def test_header_param(region: str) -> str:
        """Echoes an argument that 2026-07-28 clients also send as the Mcp-Param-Region header."""
        return f"region={region}"

    tool = mcp._tool_manager.get_tool("test_header_param")  # the SDK exposes registered tools only this way
    region = {**tool.parameters["properties"]["region"], "x-mcp-header": "Region"}
    tool.parameters = {**tool.parameters, "properties": {"region": region}}

    @mcp.resource("test://static-text", mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @mcp.resource("test://static-binary", mime_type="image/png")
    def static_binary() -> bytes:
        return base64.b64decode(PNG)

    @mcp.resource("test://template/{id}/data", mime_type="application/json")
    def template(id: str) -> str:
        return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'

    @mcp.resource("test://watched-resource", mime_type="text/plain")
    def watched() -> str:
        return "Watched resource content"

    @mcp.prompt()
    def test_simple_prompt() -> str:
        """A simple prompt."""
        return "This is a simple prompt for testing."

    @mcp.prompt()
    def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        """A prompt with arguments."""
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    return mcp


def _task_fixtures(mcp: MCPServer) -> None:
    """The tools the suite's Tasks scenarios call (`Tasks` above says which of them run as tasks)."""

    @mcp.tool()
    def greet(name: str) -> str:
        """Greets at once (never a task)."""
        return f"Hello, {name}!"

    @mcp.tool()
    async def slow_compute(seconds: float, label: str = "") -> str:
        """Sleeps `seconds`, then answers (a task for a client with the tasks extension)."""
        await anyio.sleep(seconds)
        return f"computed {label} after {seconds:g} s"

    @mcp.tool()
    async def failing_job() -> str:
        """Always a tool error (a task only)."""
        await anyio.sleep(0.2)
        raise ToolError("failing_job always fails")

    @mcp.tool()
    async def confirm_delete(filename: str) -> str:
        """Asks the client to confirm mid-task, then answers."""
        answer = await ask("elicitation/create", _form(f"Delete {filename}?", confirm="boolean"))
        confirmed = answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm")
        return f"{filename} {'deleted' if confirmed else 'kept'}"

    @mcp.tool()
    async def multi_input() -> str:
        """Asks two questions at once mid-task, then answers with both answers."""
        names: list[str] = []

        async def one(n: int) -> None:
            answer = await ask("elicitation/create", _form(f"Name {n}?", name="string", confirm="boolean"))
            names.append(str((answer.get("content") or {}).get("name")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)
            tg.start_soon(one, 2)
        return "names: " + ", ".join(sorted(names))

    @mcp.tool()
    async def test_tool_with_task(name: Annotated[UserName, Resolve(_asked_name)]) -> str:
        """Asks for the user's name in input rounds, then becomes a task that greets them."""
        escalate()
        await anyio.sleep(0.2)
        return f"Hello, {name.name}!"

    @mcp.tool()
    async def protocol_error_job() -> str:
        """Always a protocol error."""
        raise MCPError(INTERNAL_ERROR, "protocol_error_job always breaks")


def _stamped(app: ASGIApp) -> ASGIApp:
    """Every answer says the instance its task ids carry, as a kit server's do, so the gateway routes `tasks/*`."""

    async def stamped(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[INSTANCE_HEADER] = INSTANCE
            await send(message)

        await app(scope, receive, send_stamped)

    return stamped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    store = TaskStore(INSTANCE, ttl_s=60.0, max_per_owner=64, poll_ms=200)
    mcp = build(store)
    http = mcp.streamable_http_app(transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    @contextlib.asynccontextmanager
    async def lifespan(app):  # type: ignore[no-untyped-def]
        async with mcp.session_manager.run(), store.running():
            yield

    app = _stamped(Starlette(routes=list(http.routes), lifespan=lifespan))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    print(f"READY {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
