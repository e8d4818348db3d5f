"""Small MCP tool servers that speak the documented browser / container / python contracts, for tests."""

from __future__ import annotations

import contextlib
import io
import json

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from toolkit.callers import session_key
from toolkit.server import HIDDEN, ToolServer
from toolkit.settings import ToolServerSettings


class _State:
    def __init__(self) -> None:
        self.vars: dict = {}
        self.pages: list[tuple[str, str]] = []

    async def aclose(self) -> None:
        self.vars.clear()


async def _new_state(key: str) -> _State:
    return _State()


PAGES = {
    "https://example.com/tea": (
        "Tea facts",
        ["Tea is a drink.", "Green tea comes from China.", "Black tea is oxidised."],
    ),
    "https://example.org/coffee": ("Coffee facts", ["Coffee is brewed.", "Espresso is strong."]),
}


def _page(cursor: int, url: str) -> CallToolResult:
    """A page in the display format, and its structuredContent as the browser contract has it."""
    title, lines = PAGES[url]
    body = "\n".join(f"L{i}: {line}" for i, line in enumerate(lines))
    text = f"[{cursor}] {title} ({url})\n**viewing lines [0 - {len(lines) - 1}] of {len(lines) - 1}**\n\n{body}"
    structured = {"cursor": cursor, "url": url, "title": title, "lines": [0, len(lines) - 1], "total_lines": len(lines)}
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def browser_server(settings: ToolServerSettings) -> ToolServer:
    """The browser contract (display text + structuredContent) over two fixed pages; tests/browser has the real one."""
    mcp = MCPServer("browser", instructions="Tool for browsing the fixture web.")
    server: ToolServer = ToolServer(mcp, settings, _new_state)

    @mcp.tool(name="search", description="Searches for information related to `query`.")
    async def search(query: str, ctx: Context, topn: int = 10, source: str | None = None) -> CallToolResult:
        async with server.session(ctx, "search") as (_, st):
            st.pages.append(("search", query))
            cursor = len(st.pages) - 1
            lines, hits = [], []
            for i, (u, (t, body)) in enumerate(PAGES.items()):
                hits.append({"url": u, "title": t, "snippet": body[0], "lines": [len(lines), len(lines) + 1]})
                lines += [f"* 【{i}†{t}†{u.split('/')[2]}】", body[0]]
            text = f"[{cursor}] {query}\n**viewing lines [0 - {len(lines) - 1}] of {len(lines) - 1}**\n\n"
            text += "\n".join(f"L{i}: {line}" for i, line in enumerate(lines))
            structured = {
                "cursor": cursor,
                "url": None,
                "title": query,
                "lines": [0, len(lines) - 1],
                "total_lines": len(lines),
                "hits": hits,
            }
            return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    @mcp.tool(name="open", description="Opens the link `id` from the page indicated by `cursor`.")
    async def open_(ctx: Context, id: int | str = -1, cursor: int = -1, loc: int = -1, num_lines: int = -1):
        async with server.session(ctx, "open") as (_, st):
            url = id if isinstance(id, str) else list(PAGES)[id if id >= 0 else 0]
            if url not in PAGES:
                raise ValueError(f"unknown page {url}")
            st.pages.append(("page", url))
            return _page(len(st.pages) - 1, url)

    @mcp.tool(name="find", description="Finds exact matches of `pattern` in the current page.")
    async def find(pattern: str, ctx: Context, cursor: int = -1) -> CallToolResult:
        async with server.session(ctx, "find") as (_, st):
            _, url = st.pages[cursor]
            title, lines = PAGES[url]
            hits = [f"L{i}: {line}" for i, line in enumerate(lines) if pattern.lower() in line.lower()]
            st.pages.append(("find", url))
            cursor = len(st.pages) - 1
            text = f"[{cursor}] Find results for text: `{pattern}` in `{title}` ({url})\n\n" + "\n".join(hits)
            structured = {
                "cursor": cursor,
                "url": url,
                "title": title,
                "lines": [0, len(hits) - 1],
                "total_lines": len(hits),
                "pattern": pattern,
            }
            return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    return server


def python_server(settings: ToolServerSettings) -> ToolServer:
    """A stand-in for tools.python_sandbox: exec in a per-session dict (tests only, no sandbox)."""
    mcp = MCPServer("python", instructions="Stateful python (fixture). Timeout 10 seconds.")
    server: ToolServer = ToolServer(mcp, settings, _new_state)

    @mcp.tool(name="python", description="Run python code.", meta=HIDDEN)
    async def python(code: str, ctx: Context) -> str:
        async with server.session(ctx, "python") as (_, st):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    exec(code, st.vars)
                except Exception as exc:
                    return f"{type(exc).__name__}: {exc}"
            return out.getvalue()

    return server


def container_server(settings: ToolServerSettings) -> ToolServer:
    mcp = MCPServer("container", instructions="Run commands in a persistent per-session container (fixture).")
    server: ToolServer = ToolServer(mcp, settings, _new_state)

    @mcp.tool(name="exec", description="Execute a command in the container.")
    async def exec_(cmd: list[str], ctx: Context, workdir: str | None = None, timeout: int | None = None) -> str:  # noqa: ASYNC109 (the documented contract)
        if cmd[:1] == ["fail"]:
            raise ToolError("command failed")
        async with server.session(ctx, "exec"):
            if cmd[:1] == ["echo"]:
                return " ".join(cmd[1:]) + "\n"
            return json.dumps({"cmd": cmd, "workdir": workdir})

    return server


def weather_server(settings: ToolServerSettings) -> ToolServer:
    """A third-party MCP server (not a built-in namespace)."""
    mcp = MCPServer("weather", instructions="Weather lookups.")
    server: ToolServer = ToolServer(mcp, settings, _new_state)

    @mcp.tool(name="get_forecast", description="Forecast for a city.")
    async def get_forecast(city: str, ctx: Context) -> str:
        async with server.session(ctx, "get_forecast") as (key, _):
            return f"Sunny in {city} (session {key})"

    @mcp.tool(name="delete_city", description="Delete a city (dangerous).")
    async def delete_city(city: str, ctx: Context) -> str:
        return f"deleted {city}"

    return server


def recording_container_server(settings: ToolServerSettings, cleanups: list[str]) -> ToolServer:
    """A container stand-in that appends the session key of every `cleanup_session` call to `cleanups`."""
    mcp = MCPServer("container", instructions="Run commands in a persistent per-session container (recording).")

    class Recording(ToolServer):
        async def _cleanup_session(self, ctx: Context) -> str:
            cleanups.append(session_key(ctx))
            return await super()._cleanup_session(ctx)

    server: ToolServer = Recording(mcp, settings, _new_state)

    @mcp.tool(name="exec", description="Execute a command in the container.")
    async def exec_(cmd: list[str], ctx: Context) -> str:
        async with server.session(ctx, "exec") as (key, _):
            return f"ran {cmd} in {key}\n"

    return server
