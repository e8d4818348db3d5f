"""MCP tool access: namespace discovery and calls through the gateway (`{url}/{ns}/mcp`) or a server's URL.

Failures never escape as exceptions into the turn loop: a call returns a `ToolOutcome` whose text the
model reads (an error says what went wrong), so the model can retry or answer without the tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
import structlog
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED
from mcp_types import CallToolResult
from opentelemetry.trace import SpanKind

from orchestrator.guard.addresses import hide
from orchestrator.guard.mcp_policy import PinnedTransport
from orchestrator.harmony import Namespace
from orchestrator.settings import KEEPALIVE_EXPIRY_S
from toolkit.handles import ARGUMENT as HANDLE_ARGUMENT
from toolkit.tracing import annotate, current_request_id, inject, span
from toolkit.wire import ANONYMOUS, MEMORY_HEADER, OWNER_HEADER, REQUEST_ID_HEADER, SESSION_HEADER, sign_owner

log = structlog.get_logger(__name__)


class ToolUnavailable(Exception):
    """The tool server could not be reached or did not answer in time."""


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False
    images: list[str] = field(default_factory=list)  # data: or http URLs from image content
    structured: dict[str, Any] | None = None  # structuredContent: browser {cursor, url, title, hits}, exec {stdout,..}
    outcome: str = ""  # ok, tool_error, timeout, unavailable, rejected, error (metrics); "" = from is_error
    files: list[dict[str, Any]] = field(default_factory=list)  # container files the call wrote (their bodies)

    @property
    def kind(self) -> str:
        return self.outcome or ("error" if self.is_error else "ok")


@dataclass
class Endpoints:
    """Where each namespace's MCP endpoint lives: a per-namespace URL, else `{tools_url}/{ns}/mcp`."""

    tools_url: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)

    def url_for(self, namespace: str) -> str | None:
        if url := self.overrides.get(namespace):
            return url
        return f"{self.tools_url.rstrip('/')}/{namespace}/mcp" if self.tools_url else None


def _client(
    url: str,
    headers: dict[str, str],
    timeout_s: float,
    address: str | None = None,
    keepalive_s: float = KEEPALIVE_EXPIRY_S,
) -> Client:
    """An MCP client of `url`; with `address`, every connection goes to that checked IP (no proxy, no DNS).
    An idle connection is dropped after `keepalive_s`, before the server's own keep-alive closes it (uvicorn:
    5 s), so a call is never sent on a connection its server is closing (a connection of one response's
    session sits idle while the model writes)."""
    pinned = {"transport": PinnedTransport(url, address), "trust_env": False} if address else {}
    http = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(timeout_s, connect=5.0),
        # httpx's own pool sizes, with the shorter idle expiry
        limits=httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=keepalive_s),
        event_hooks={"request": [_trace_context]},
        **pinned,
    )
    return Client(streamable_http_client(url, http_client=http), mode="auto", read_timeout_seconds=timeout_s)


async def _trace_context(request: httpx2.Request) -> None:
    """Every MCP HTTP request carries the calling span's `traceparent` and the response's request id (the SDK
    sends each message in its sender's context), so the gateway and tool server join this response's trace
    and logs."""
    inject(request.headers)
    if (rid := current_request_id()) is not None:
        request.headers[REQUEST_ID_HEADER] = rid


def loggable(url: str) -> str:
    """A URL without user-info, query or fragment (where clients put tokens), for logs."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(not a URL)"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def private_session_id(conversation: str, url: str) -> str:
    """The `x-session-id` a client-named server gets: stable per conversation and server, but neither the
    conversation id that the fleet's own tool servers see nor any other server's id."""
    return "conv_" + hashlib.sha256(f"{conversation}\0{url}".encode()).hexdigest()[:32]


def _error_text(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


@dataclass
class _Connection:
    """A client hosted by `ToolSessions._keep`; `lost` says why its transport died, once it did."""

    client: Client
    ended: anyio.Event = field(default_factory=anyio.Event)
    lost: str | None = None

    async def lost_reason(self) -> str | None:
        """Why the transport died: a call failing as it dies waits briefly for its keeper to have said."""
        with anyio.move_on_after(1):
            await self.ended.wait()
        return self.lost


def _closed(exc: BaseException) -> bool:
    """Whether a call failed because its connection closed under it (the transport died)."""
    return isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED


class ToolSessions:
    """The MCP connections of one response, opened on first use and closed together at its end."""

    def __init__(
        self,
        *,
        session_id: str,
        timeout_s: float = 120.0,
        keepalive_s: float = KEEPALIVE_EXPIRY_S,
        owner: str = ANONYMOUS,
    ) -> None:
        self.session_id = session_id
        self.timeout_s = timeout_s
        self.keepalive_s = keepalive_s
        self.owner = owner
        """The key the calls are made for: named to the fleet's tool servers (signed), never to a client's."""
        self._owner_header = sign_owner(owner)
        self.used: set[str] = set()  # URLs called: their sessions need `cleanup_session` eventually
        # URL -> the session id a container names there: its sandbox belongs to the container, not to this
        # conversation, so it is not in `used` (the container's expiry or the server's TTL frees it)
        self.named: dict[str, str] = {}
        # URL -> the sandbox size (MiB) a container asks there, above the tool server's default
        self.sizes: dict[str, int] = {}
        self._clients: dict[tuple[str, tuple[tuple[str, str], ...]], _Connection] = {}
        self._keeping: anyio.abc.TaskGroup | None = None
        self._closing = anyio.Event()
        self._stack = contextlib.AsyncExitStack()

    async def _get(self, url: str, headers: dict[str, str] | None, address: str | None, session_id: str) -> _Connection:
        merged = {**(headers or {}), SESSION_HEADER: session_id}
        key = (url, tuple(sorted(merged.items())))
        if key not in self._clients:
            try:  # no timeout scope here: the client's task group outlives this block (httpx times out connects)
                self._clients[key] = await (await self._keepers()).start(self._keep, key, url, merged, address)
            except BaseException as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
                log.warning("tool.connect_failed", url=loggable(url), error=_error_text(exc))
                raise ToolUnavailable(f"cannot connect to the tool server: {hide(_error_text(exc))}") from None
        return self._clients[key]

    async def _keepers(self) -> anyio.abc.TaskGroup:
        """The task group holding the connections, entered on first use in the response's task and left by
        `aclose` after telling every connection to close."""
        if self._keeping is None:
            self._keeping = await self._stack.enter_async_context(anyio.create_task_group())
            self._stack.callback(self._closing.set)
        return self._keeping

    async def _keep(
        self,
        key: tuple[str, tuple[tuple[str, str], ...]],
        url: str,
        headers: dict[str, str],
        address: str | None,
        *,
        task_status: anyio.abc.TaskStatus[_Connection],
    ) -> None:
        """One connection, in a task of its own: a transport that dies (the gateway replica relaying a call was
        killed) cancels the task hosting the client's task group, which must be this one and not the
        response's, whose run would otherwise end as if someone had cancelled it. The call waiting on it then
        fails like any tool failure; the next call reconnects."""
        conn: _Connection | None = None
        try:
            async with _client(url, headers, self.timeout_s, address, self.keepalive_s) as client:
                conn = _Connection(client)
                task_status.started(conn)
                await self._closing.wait()
        except Exception as exc:
            if conn is None:
                raise  # before `started`: the connect failed, `_get` says so
            conn.lost = _error_text(exc)
            self._clients.pop(key, None)
            log.warning("tool.connection_lost", url=loggable(url), error=conn.lost)
        finally:
            if conn is not None:
                conn.ended.set()

    async def call(
        self,
        url: str,
        name: str,
        args: dict[str, Any],
        headers: dict[str, str] | None = None,
        *,
        address: str | None = None,
        client_named: bool = False,
    ) -> ToolOutcome:
        """Call `name` on `url`. A `client_named` server gets its own session id and no `cleanup_session`
        later (it is reached only while its request's checked address and credentials are at hand)."""
        ns = urllib.parse.urlsplit(url).path.strip("/").partition("/")[0] or None
        with span(
            f"tool {name}", kind=SpanKind.CLIENT, tool=name, url=loggable(url), session_id=self.session_id, namespace=ns
        ) as current:
            outcome = await self._call(url, name, args, headers, address=address, client_named=client_named)
            annotate(current, outcome=outcome.kind)
            return outcome

    async def _call(
        self,
        url: str,
        name: str,
        args: dict[str, Any],
        headers: dict[str, str] | None,
        *,
        address: str | None,
        client_named: bool,
    ) -> ToolOutcome:
        start = time.perf_counter()
        outcome = "error"
        session_id = private_session_id(self.session_id, url) if client_named else self.session_id
        session_id = self.named.get(url, session_id)
        if url in self.sizes:
            headers = {**(headers or {}), MEMORY_HEADER: str(self.sizes[url])}
        if not client_named:
            headers = self._owned(headers)
        conn: _Connection | None = None
        try:
            conn = await self._get(url, headers, address, session_id)
            if not client_named and url not in self.named:
                self.used.add(url)
            with anyio.fail_after(self.timeout_s):
                answered = _answered(await conn.client.call_tool(name, args))
            outcome = answered.outcome
            return answered
        except ToolUnavailable as exc:
            outcome = "unavailable"
            return ToolOutcome(f"Error: {exc}", True, outcome=outcome)
        except TimeoutError:
            outcome = "timeout"
            return ToolOutcome(
                f"Error: the tool `{name}` did not answer within {self.timeout_s:.0f} s", True, outcome=outcome
            )
        except Exception as exc:
            if conn is not None and _closed(exc) and (reason := await conn.lost_reason()):
                outcome = "unavailable"
                text = f"Error: the connection to the tool server broke during the call: {hide(reason)}"
                return ToolOutcome(text, True, outcome=outcome)
            log.warning("tool.failed", url=loggable(url), tool=name, error=_error_text(exc))
            return ToolOutcome(f"Error: the tool `{name}` failed: {hide(_error_text(exc))}", True, outcome="error")
        finally:
            ms = round((time.perf_counter() - start) * 1000, 2)
            log.info("tool.call", url=loggable(url), tool=name, ms=ms, outcome=outcome, session_id=session_id)

    def _owned(self, headers: dict[str, str] | None) -> dict[str, str]:
        """A fleet call's headers with the owner header, which only the orchestrator writes: any spelling of it
        among the request's own headers is dropped (a second one could reach the tool first)."""
        kept = {k: v for k, v in (headers or {}).items() if k.lower() != OWNER_HEADER}
        return {**kept, OWNER_HEADER: self._owner_header}

    async def call_once(self, url: str, name: str, args: dict[str, Any]) -> ToolOutcome:
        """`call` over a connection of its own, closed before it returns: for a call made before the response's
        task runs (the shared connections must be entered and closed in that one task)."""
        once = ToolSessions(
            session_id=self.session_id, timeout_s=self.timeout_s, keepalive_s=self.keepalive_s, owner=self.owner
        )
        once.named, once.sizes = self.named, self.sizes
        try:
            return await once.call(url, name, args)
        finally:
            await once.aclose()

    async def aclose(self) -> None:
        try:  # no shield scope around this: the clients' own scopes must exit first (anyio nesting)
            await self._stack.aclose()
        except Exception as exc:  # a server that went away while we held its session
            log.warning("tool.close_failed", error=_error_text(exc))
        self._clients.clear()


async def cleanup_sessions(session_id: str, urls: set[str], headers: dict[str, str] | None = None) -> None:
    """Tell each tool server to free what `session_id` holds (best effort, bounded in time)."""

    async def one(url: str) -> None:
        try:
            with anyio.fail_after(10):
                async with _client(url, {**(headers or {}), SESSION_HEADER: session_id}, 10) as client:
                    await client.call_tool("cleanup_session", {})
            log.info("tool.cleanup", url=url, session_id=session_id)
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            log.warning("tool.cleanup_failed", url=url, session_id=session_id, error=_error_text(exc))

    async with anyio.create_task_group() as tg:
        for url in urls:
            tg.start_soon(one, url)


@dataclass
class Listing:
    name: str
    instructions: str
    tools: list[dict[str, Any]]  # {"name", "description", "parameters", "hidden"}


def _without_handle(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters as the model sees them: the fleet's session handle argument is for clients without
    `x-session-id`; the orchestrator always sends one, so the model never sees it."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or HANDLE_ARGUMENT not in properties:
        return schema
    return {**schema, "properties": {k: v for k, v in properties.items() if k != HANDLE_ARGUMENT}}


class Discovery:
    """Namespace descriptions and tool lists, as the tool servers announce them; cached for a while."""

    def __init__(self, *, ttl_s: float = 60.0) -> None:
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str | None, tuple[tuple[str, str], ...]], tuple[float, Listing]] = {}

    async def list(self, url: str, headers: dict[str, str] | None = None, address: str | None = None) -> Listing:
        """Raises ToolUnavailable when the server cannot be listed; `address`: connect to that IP only."""
        key = (url, address, tuple(sorted((headers or {}).items())))
        hit = self._cache.get(key)
        if hit and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        try:
            with anyio.fail_after(15):
                async with _client(url, dict(headers or {}), 15, address) as client:
                    result = await client.list_tools()
                    info = client.server_info
                    listing = Listing(
                        name=info.name if info else "",
                        instructions=client.instructions or "",
                        tools=[
                            {
                                "name": t.name,
                                "description": t.description or "",
                                "parameters": t.input_schema,
                                "hidden": (t.meta or {}).get("include_in_prompt") is False,
                            }
                            for t in result.tools
                        ],
                    )
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            log.warning("tool.list_failed", url=loggable(url), error=_error_text(exc))
            raise ToolUnavailable(f"cannot list the tools: {hide(_error_text(exc))}") from None
        self._cache[key] = (time.monotonic(), listing)
        return listing

    async def namespace(self, name: str, url: str, headers: dict[str, str] | None = None) -> Namespace:
        listing = await self.list(url, headers)
        shown = tuple(
            {"name": t["name"], "description": t["description"], "parameters": _without_handle(t["parameters"])}
            for t in listing.tools
            if not t["hidden"] and not (name == "python" and t["name"] == "python")
        )
        return Namespace(name, listing.instructions, shown)


def _answered(result: CallToolResult) -> ToolOutcome:
    """A tool's result as the model reads it: its texts joined, its images as data URLs, its structured content."""
    texts, images = [], []
    for part in result.content:
        if getattr(part, "type", None) == "text":
            texts.append(part.text)
        elif getattr(part, "type", None) == "image":
            images.append(f"data:{part.mime_type};base64,{part.data}")
    outcome = "tool_error" if result.is_error else "ok"
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    return ToolOutcome("\n".join(texts), bool(result.is_error), images, structured, outcome)
