"""The MCP shell around the browser: tools and description from openai_harmony, request options, errors.

The model reads the namespace description and the three tool schemas exactly as the library that
defines the gpt-oss format gives them (`ToolNamespaceConfig.browser()`); an operator may replace
the description with `--instructions-file`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from openai_harmony import ToolNamespaceConfig

from toolkit.server import Faults, Reply, ToolServer
from toolkit.signature import Op
from tools.browser.core import CONTEXT_SCALE, Browser, BrowserError, Options, Session
from tools.browser.settings import BrowserSettings

FAULTS = Faults("browser", usage=(BrowserError,))
SWITCH = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def options_from_headers(headers: Mapping[str, str]) -> Options:
    """The request options the orchestrator (or any client) sends as x-browser-* headers."""
    raw_domains = headers.get("x-browser-allowed-domains", "").split(",")
    domains = tuple(d.strip().lower().removeprefix("www.") for d in raw_domains)
    access = headers.get("x-browser-external-access", "on").strip().lower()
    size = headers.get("x-browser-context-size", "medium").strip().lower()
    if access not in SWITCH:
        raise ToolError("header x-browser-external-access must be on or off")
    if size not in CONTEXT_SCALE:
        raise ToolError("header x-browser-context-size must be low, medium or high")
    location: dict = {}
    if raw := headers.get("x-browser-user-location"):
        try:
            location = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolError("header x-browser-user-location must be a JSON object") from exc
        if not isinstance(location, dict):
            raise ToolError("header x-browser-user-location must be a JSON object")
    return Options(tuple(d for d in domains if d), SWITCH[access], size, location)


def _options(ctx: Context) -> Options:
    request = ctx.request_context.request
    return options_from_headers(getattr(request, "headers", None) or {})


def _int(value: float | int | None, name: str) -> int | None:
    """The schema says `number`: accept 3 and 3.0, refuse 3.5; -1 (the schema's default) means absent."""
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value:
        raise ToolError(f"{name} must be a whole number")
    return None if value == -1 else int(value)


def build_server(settings: BrowserSettings, browser: Browser) -> ToolServer[Session]:
    config = ToolNamespaceConfig.browser()
    mcp = MCPServer("browser", instructions=settings.instructions(config.description))

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with browser:
            yield

    kit: ToolServer[Session] = ToolServer(mcp, settings, browser.new_session, lifespan=lifespan)

    @kit.tool("search", FAULTS)
    def search(ctx: Context, query: str, topn: float = 10, source: str | None = None) -> Op[Session, Reply]:
        n = _int(topn, "topn") or 10
        opt = _options(ctx)
        return _shown(lambda s: browser.search(s, query, n, source, opt))

    @kit.tool("open", FAULTS)
    def open_(
        ctx: Context,
        id: float | str = -1,
        cursor: float = -1,
        loc: float = -1,
        num_lines: float = -1,
        view_source: bool = False,
        source: str | None = None,
    ) -> Op[Session, Reply]:
        target = id if isinstance(id, str) else _int(id, "id")
        c, start, n = _int(cursor, "cursor"), _int(loc, "loc"), _int(num_lines, "num_lines")
        opt = _options(ctx)
        return _shown(lambda s: browser.open(s, target, c, start, n, view_source, opt))

    @kit.tool("find", FAULTS)
    def find(ctx: Context, pattern: str, cursor: float = -1) -> Op[Session, Reply]:
        c = _int(cursor, "cursor")
        opt = _options(ctx)
        return _shown(lambda s: browser.find(s, pattern, c, opt))

    for spec in config.tools:  # what the model reads: the library's descriptions and schemas
        tool = mcp._tool_manager.get_tool(spec.name)  # the SDK exposes registered tools only this way
        tool.description, tool.parameters = spec.description, spec.parameters
    return kit


def _shown(op: Callable[[Session], Awaitable[int]]) -> Op[Session, Reply]:
    """A browser operation in the caller's session (its page stack); its new page is the answer."""

    async def shown(session: Session) -> Reply:
        cursor = await op(session)
        view = session.views[cursor]
        return Reply(view.render(cursor), view.structured(cursor))

    return shown
