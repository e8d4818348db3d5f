"""MCP tool access: namespace discovery and calls through the gateway (`{url}/{ns}/mcp`) or a server's URL.

Failures never escape as exceptions into the turn loop: a call returns a `ToolOutcome` whose text the
model reads (an error says what went wrong), so the model can retry or answer without the tool.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from opentelemetry.trace import SpanKind

from orchestrator.guard.addresses import hide
from orchestrator.harmony import Namespace
from orchestrator.settings import KEEPALIVE_EXPIRY_S
from toolkit.handles import ARGUMENT as HANDLE_ARGUMENT
from toolkit.mcpwire.client import McpClient, TaskLost
from toolkit.mcpwire.http import ClosedUnanswered, ConnectFailed, Pool, ProtocolError, Timeouts
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


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Pool]] = weakref.WeakKeyDictionary()
"""The keep-alive connections to tool servers, per event loop (a connection belongs to the loop that made it) and
per idle expiry: shared by every response the loop runs, so a call reuses the connection the last one left."""


def _pool(keepalive_s: float = KEEPALIVE_EXPIRY_S) -> Pool:
    """This loop's pool. An idle connection is dropped after `keepalive_s`, before the server's own keep-alive
    closes it (uvicorn: 5 s), so a call is rarely sent on a connection its server is closing (the pool sends a
    request that such a connection ended unanswered once more, on a new one)."""
    pools = _POOLS.setdefault(asyncio.get_running_loop(), {})
    if (pool := pools.get(keepalive_s)) is None:
        pool = pools[keepalive_s] = Pool(max_idle=20, idle_s=keepalive_s)
    return pool


def close_pools() -> None:
    """Close this loop's idle tool-server connections (the orchestrator's shutdown)."""
    for pool in _POOLS.pop(asyncio.get_running_loop(), {}).values():
        pool.close()


def _client(
    url: str,
    headers: dict[str, str],
    timeout_s: float | None,
    address: str | None = None,
    keepalive_s: float = KEEPALIVE_EXPIRY_S,
    inline_ms: int | None = None,
) -> McpClient:
    """An MCP client of `url`; with `address`, every connection goes to that checked IP (no proxy, no DNS), with
    the URL's host in `Host` and TLS SNI. It follows no redirect: an answer elsewhere is an error. `inline_ms`:
    it takes MCP tasks, for calls still running after that long. `timeout_s` None: every use of the client is
    bounded by its caller (a session's calls by their own timeout), so its requests arm no timer of their own."""
    timeouts = Timeouts(connect=5.0, read=timeout_s)
    pool = _pool(keepalive_s)
    return McpClient(pool, url, headers, timeouts=timeouts, address=address, stamp=_trace_context, inline_ms=inline_ms)


def _trace_context(headers: dict[str, str]) -> None:
    """Every MCP HTTP request carries the calling span's `traceparent` and the response's request id (computed
    in the calling task), so the gateway and tool server join this response's trace and logs."""
    inject(headers)
    if (rid := current_request_id()) is not None:
        headers[REQUEST_ID_HEADER] = rid


@functools.lru_cache(maxsize=1024)
def loggable(url: str) -> str:
    """A URL without user-info, query or fragment (where clients put tokens), for logs (parsed once per URL:
    every call logs and traces its server's)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "(not a URL)"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


@functools.lru_cache(maxsize=1024)
def _namespace(url: str) -> str | None:
    """The first path segment of a tool URL (`{gateway}/{ns}/mcp`), for the call's span."""
    return urllib.parse.urlsplit(url).path.strip("/").partition("/")[0] or None


def private_session_id(conversation: str, url: str) -> str:
    """The `x-session-id` a client-named server gets: stable per conversation and server, but neither the
    conversation id that the fleet's own tool servers see nor any other server's id."""
    return "conv_" + hashlib.sha256(f"{conversation}\0{url}".encode()).hexdigest()[:32]


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def interrupted(why: str) -> str:
    """What the model reads of a call cut off when the server running it stopped: never a made-up result."""
    return (
        f"Error: this call was interrupted before the tool answered (the server running it stopped), and {why}:"
        " what it did, if anything, is unknown. Check before calling it again."
    )


LOST_TASK = interrupted("its task is gone")


@dataclass
class Resume:
    """A call adopted in flight (`adopt.go_on`): its MCP task at `url` is followed instead of calling again;
    `rerun`: the call may be made again if the task is lost."""

    url: str
    task_id: str
    rerun: bool = False


OnTask = Callable[[str, str], Awaitable[object]]
"""(url, task id): a call became an MCP task (the checkpoint records it before the first poll)."""

_BROKEN = (ProtocolError, ClosedUnanswered, ConnectionError, asyncio.IncompleteReadError)
"""How a call fails when its connection breaks under it (the gateway replica relaying it was killed)."""


class ToolSessions:
    """The MCP clients of one response, opened on first use and closed together at its end."""

    def __init__(
        self,
        *,
        session_id: str,
        timeout_s: float = 120.0,
        keepalive_s: float = KEEPALIVE_EXPIRY_S,
        owner: str = ANONYMOUS,
        task_after_ms: int | None = None,
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
        self._clients: dict[tuple[str, str | None, tuple[tuple[str, str], ...]], McpClient] = {}
        self.task_after_ms = task_after_ms
        """Calls to the fleet's servers still running after this long become MCP tasks (None: never)."""
        self.on_task: OnTask | None = None
        self.resuming: Resume | None = None
        """Set by an adopting replica: the next call follows this task instead of calling."""
        self.tasks: dict[str, McpClient] = {}
        """The tasks of calls in flight, or left by a call cancelled mid-poll (`cancel_tasks`)."""

    async def _get(
        self, url: str, headers: dict[str, str] | None, address: str | None, session_id: str, fleet: bool = True
    ) -> McpClient:
        """The client of `url` with these headers, its era negotiated; one that fails to open is not kept, so
        the next call tries again. Only a `fleet` server's calls become tasks (a client-named server's task
        could not be followed by another replica, which holds neither its checked address nor credentials)."""
        merged = {**(headers or {}), SESSION_HEADER: session_id}
        key = (url, address, tuple(sorted(merged.items())))
        client = self._clients.get(key)
        if client is None:  # kept before it opens: a concurrent call waits for the one negotiation
            inline = self.task_after_ms if fleet else None
            # no read timer per request: each use is bounded, by the call's timeout or a close's (same length or less)
            client = self._clients[key] = _client(url, merged, None, address, self.keepalive_s, inline)
        if client.version is not None:
            return client
        try:
            with anyio.fail_after(self.timeout_s):
                await client.open()
        except Exception as exc:
            self._clients.pop(key, None)
            log.warning("tool.connect_failed", url=loggable(url), error=_error_text(exc))
            raise ToolUnavailable(f"cannot connect to the tool server: {hide(_error_text(exc))}") from None
        return client

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
        with span(
            f"tool {name}",
            kind=SpanKind.CLIENT,
            tool=name,
            url=loggable(url),
            session_id=self.session_id,
            namespace=_namespace(url),
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
        outcome = ToolOutcome("", True, outcome="error")
        session_id = private_session_id(self.session_id, url) if client_named else self.session_id
        session_id = self.named.get(url, session_id)
        if url in self.sizes:
            headers = {**(headers or {}), MEMORY_HEADER: str(self.sizes[url])}
        if not client_named:
            headers = self._owned(headers)
        try:
            client = await self._get(url, headers, address, session_id, not client_named)
            if not client_named and url not in self.named:
                self.used.add(url)
            async with asyncio.timeout(self.timeout_s):  # asyncio's own: a third of anyio's cost, per call
                outcome = _answered(await self._invoke(client, url, name, args))
        except Exception as exc:
            if isinstance(exc, TimeoutError):  # given up on: its task's work is stopped too
                await self.cancel_tasks()
            outcome = self._failed(url, name, exc)
        finally:
            ms = round((time.perf_counter() - start) * 1000, 2)
            log.info("tool.call", url=loggable(url), tool=name, ms=ms, outcome=outcome.kind, session_id=session_id)
        return outcome

    async def _invoke(self, client: McpClient, url: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """`tools/call`, or the task an adopted call left (`resuming`). A task is kept in `tasks` until its
        call ends; a call cancelled mid-poll leaves it there: a cancelled response cancels it (`cancel_tasks`),
        a replica handing the response over leaves it to the next."""
        resume, self.resuming = self.resuming, None
        started: list[str] = []

        async def record(task_id: str) -> None:
            started.append(task_id)
            self.tasks[task_id] = client
            if self.on_task is not None:
                await self.on_task(url, task_id)
            log.info("tool.task_started", task_id=task_id, url=loggable(url), tool=name)

        try:
            if resume is not None and (result := await self._resumed(client, url, resume, record)) is not None:
                return result
            result = await client.call_tool(name, args, record)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._forget(started)
            raise
        self._forget(started)
        return result

    def _forget(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            self.tasks.pop(task_id, None)

    async def _resumed(
        self, client: McpClient, url: str, resume: Resume, record: Callable[[str], Awaitable[None]]
    ) -> dict[str, Any] | None:
        """The result of the task an adopted call left; None: it is lost and the call may run again."""
        try:
            if resume.url != url:
                raise TaskLost(f"its server moved ({loggable(resume.url)} then, {loggable(url)} now)")
            await record(resume.task_id)
            log.info("tool.task_followed", task_id=resume.task_id, url=loggable(url))
            return await client.task_result(resume.task_id)
        except TaskLost as exc:
            then = "rerun" if resume.rerun else "interrupt"
            log.warning("tool.task_lost", task_id=resume.task_id, error=str(exc), then=then)
            if not resume.rerun:
                raise
            return None

    async def cancel_tasks(self) -> None:
        """Cancel the tasks of calls in flight (the response was cancelled, or gave up on the call): the
        server stops their work. Best effort, bounded in time, shielded from the caller's own cancel."""
        tasks, self.tasks = self.tasks, {}
        with anyio.CancelScope(shield=True):
            for task_id, client in tasks.items():
                try:
                    with anyio.fail_after(5):
                        await client.cancel_task(task_id)
                    log.info("tool.task_cancelled", task_id=task_id)
                except Exception as exc:
                    log.warning("tool.task_cancel_failed", task_id=task_id, error=_error_text(exc))

    async def cancel_task(self, url: str, task_id: str) -> None:
        """Cancel a task a stopped replica's call left (a response cancelled before another adopted it)."""
        self.tasks[task_id] = await self._get(url, self._owned(None), None, self.session_id)
        await self.cancel_tasks()

    def _failed(self, url: str, name: str, exc: Exception) -> ToolOutcome:
        """What the model reads of a call that failed: the failures are told apart for it and for the metrics."""
        match exc:
            case TaskLost():
                return ToolOutcome(LOST_TASK, True, outcome="interrupted")
            case ToolUnavailable():
                return ToolOutcome(f"Error: {exc}", True, outcome="unavailable")
            case TimeoutError():
                text = f"Error: the tool `{name}` did not answer within {self.timeout_s:.0f} s"
                return ToolOutcome(text, True, outcome="timeout")
            case ConnectFailed():
                text = f"Error: cannot connect to the tool server: {hide(_error_text(exc))}"
                return ToolOutcome(text, True, outcome="unavailable")
            case _ if isinstance(exc, _BROKEN):
                log.warning("tool.connection_lost", url=loggable(url), error=_error_text(exc))
                text = f"Error: the connection to the tool server broke during the call: {hide(_error_text(exc))}"
                return ToolOutcome(text, True, outcome="unavailable")
        log.warning("tool.failed", url=loggable(url), tool=name, error=_error_text(exc))
        return ToolOutcome(f"Error: the tool `{name}` failed: {hide(_error_text(exc))}", True, outcome="error")

    def _owned(self, headers: dict[str, str] | None) -> dict[str, str]:
        """A fleet call's headers with the owner header, which only the orchestrator writes: any spelling of it
        among the request's own headers is dropped (a second one could reach the tool first)."""
        kept = {k: v for k, v in (headers or {}).items() if k.lower() != OWNER_HEADER}
        return {**kept, OWNER_HEADER: self._owner_header}

    async def call_once(self, url: str, name: str, args: dict[str, Any]) -> ToolOutcome:
        """`call` with clients of its own, closed before it returns: for a call made outside a response's run
        (a container's files, a vector store's ingestion), whose sessions nobody else closes."""
        once = ToolSessions(
            session_id=self.session_id, timeout_s=self.timeout_s, keepalive_s=self.keepalive_s, owner=self.owner
        )
        once.named, once.sizes = self.named, self.sizes
        try:
            return await once.call(url, name, args)
        finally:
            await once.aclose()

    async def aclose(self) -> None:
        """End the 2025-era sessions the clients opened (sessionless ones have nothing to end), bounded in time."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                with anyio.fail_after(5):
                    await client.aclose()
            except Exception as exc:  # a server that went away while we held its session
                log.warning("tool.close_failed", url=loggable(client.url), error=_error_text(exc))


async def cleanup_sessions(session_id: str, urls: set[str], headers: dict[str, str] | None = None) -> None:
    """Tell each tool server to free what `session_id` holds (best effort, bounded in time)."""

    async def one(url: str) -> None:
        client = _client(url, {**(headers or {}), SESSION_HEADER: session_id}, 10)
        try:
            with anyio.fail_after(10):
                try:
                    await client.call_tool("cleanup_session", {})
                finally:
                    await client.aclose()
            log.info("tool.cleanup", url=url, session_id=session_id)
        except Exception as exc:
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
                listing = await _listing(_client(url, dict(headers or {}), 15, address))
        except Exception as exc:
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


async def _listing(client: McpClient) -> Listing:
    """What a server announces: its name and instructions, and its tools (those without a name left out)."""
    try:
        tools = await client.list_tools()
    finally:
        await client.aclose()
    return Listing(
        name=client.server_name,
        instructions=client.instructions,
        tools=[
            {
                "name": t["name"],
                "description": str(t.get("description") or ""),
                "parameters": t["inputSchema"] if isinstance(t.get("inputSchema"), dict) else {"type": "object"},
                "hidden": isinstance(t.get("_meta"), dict) and t["_meta"].get("include_in_prompt") is False,
            }
            for t in tools
            if isinstance(t.get("name"), str)
        ],
    )


def _answered(result: dict[str, Any]) -> ToolOutcome:
    """A tool's result as the model reads it: its texts joined, its images as data URLs, its structured content."""
    texts, images = [], []
    for part in result.get("content") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "image":
            images.append(f"data:{part.get('mimeType')};base64,{part.get('data')}")
    failed = bool(result.get("isError"))
    structured = result.get("structuredContent")
    return ToolOutcome(
        "\n".join(texts),
        failed,
        images,
        structured if isinstance(structured, dict) else None,
        "tool_error" if failed else "ok",
    )
